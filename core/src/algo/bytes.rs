//! The stored byte format's building blocks. Each algorithm writes and reads its own fields
//! (`Algorithm::encode` / `decode`); `state` frames them with the policy and a version.

/// Why stored bytes are not a valid state: the reason, as `state` reports it.
pub type Invalid = &'static str;

/// A bounds-checked cursor over encoded bytes, little-endian.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Invalid> {
        let (head, rest) = self.0.split_first_chunk::<N>().ok_or("truncated")?;
        self.0 = rest;
        Ok(*head)
    }

    pub fn u8(&mut self) -> Result<u8, Invalid> {
        Ok(self.take::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, Invalid> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    pub fn u64(&mut self) -> Result<u64, Invalid> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    pub fn u128(&mut self) -> Result<u128, Invalid> {
        Ok(u128::from_le_bytes(self.take()?))
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.0.len()
    }
}
