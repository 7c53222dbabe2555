//! How a key's limit is split between regions: in proportion to what each was asked, above a
//! floor, out of what the unreachable regions leave. Pure.

/// The target share of each region: `None` for a region whose demand is unknown (unreachable:
/// it keeps what it has, and `reserved` is the most it may use). A floor for every reachable
/// region, the rest in proportion to `demand`, rounded down so the targets never sum above
/// `limit − reserved`. None overall when no reachable region was asked anything: nothing moves.
pub fn split(
    limit: u64,
    floor: u64,
    reserved: u64,
    demand: &[Option<u64>],
) -> Option<Vec<Option<u64>>> {
    let reachable = demand.iter().flatten().count() as u64;
    let total: u128 = demand.iter().flatten().map(|&d| u128::from(d)).sum();
    if reachable == 0 || total == 0 {
        return None;
    }
    let budget = limit.saturating_sub(reserved);
    let floors = floor.saturating_mul(reachable);
    let floor = if floors > budget {
        budget / reachable
    } else {
        floor
    };
    let rest = u128::from(budget - floor * reachable);
    Some(
        demand
            .iter()
            .map(|d| d.map(|d| floor + u64::try_from(rest * u128::from(d) / total).unwrap_or(0)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proportional_above_the_floor() {
        assert_eq!(
            split(1000, 5, 0, &[Some(1200), Some(0), Some(0)]),
            Some(vec![Some(990), Some(5), Some(5)])
        );
        assert_eq!(
            split(1000, 5, 0, &[Some(400), Some(400), Some(400)]),
            Some(vec![Some(333), Some(333), Some(333)])
        );
        assert_eq!(
            split(1000, 5, 400, &[Some(10), None, Some(30)]),
            Some(vec![Some(152), None, Some(447)])
        );
        assert_eq!(split(1000, 5, 0, &[Some(0), None, Some(0)]), None);
    }

    #[test]
    fn never_above_the_budget() {
        for l in [1u64, 3, 10, 1000] {
            for d in [[1u64, 2, 3], [0, 0, 9], [u64::MAX, 1, u64::MAX]] {
                let demand: Vec<Option<u64>> = d.iter().map(|&x| Some(x)).collect();
                let targets = split(l, 1, 0, &demand).unwrap();
                let sum: u64 = targets.iter().flatten().sum();
                assert!(sum <= l, "{l} {d:?} {targets:?}");
            }
        }
    }
}
