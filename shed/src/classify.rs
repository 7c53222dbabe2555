//! How a request gets its tier and tenant: from headers (the sidecar's flags), or any closure
//! over the request (a route rule, an extension an authenticating layer set).

use http::{HeaderName, Request};

use crate::admission::Ticket;
use crate::tier::Tier;

pub trait Classify<B>: Clone + Send + Sync + 'static {
    fn classify(&self, req: &Request<B>) -> Ticket;
}

impl<B, F> Classify<B> for F
where
    F: Fn(&Request<B>) -> Ticket + Clone + Send + Sync + 'static,
{
    fn classify(&self, req: &Request<B>) -> Ticket {
        self(req)
    }
}

/// The tier from one header (`critical`, `default`, `sheddable`, `batch`; `default` when absent
/// or unknown, so a typo never makes a request critical) and the tenant from another (none: all
/// requests are one tenant).
#[derive(Clone, Debug)]
pub struct ByHeaders {
    pub priority: Option<HeaderName>,
    pub tenant: Option<HeaderName>,
}

impl ByHeaders {
    pub fn new(priority: Option<HeaderName>, tenant: Option<HeaderName>) -> ByHeaders {
        ByHeaders { priority, tenant }
    }
}

impl<B> Classify<B> for ByHeaders {
    fn classify(&self, req: &Request<B>) -> Ticket {
        let header = |name: &Option<HeaderName>| {
            name.as_ref()
                .and_then(|n| req.headers().get(n))
                .and_then(|v| v.to_str().ok())
        };
        Ticket {
            tier: header(&self.priority)
                .and_then(Tier::parse)
                .unwrap_or(Tier::Default),
            tenant: header(&self.tenant).unwrap_or("").to_string(),
        }
    }
}
