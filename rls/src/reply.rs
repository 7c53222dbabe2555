//! One HTTP reply of the HTTP ports (`http.rs`) and of the handlers they call (`json.rs`).

pub struct Reply {
    pub status: &'static str,
    pub kind: &'static str,
    pub body: String,
}

impl Reply {
    pub fn text(status: &'static str, body: impl Into<String>) -> Reply {
        Reply {
            status,
            kind: "text/plain",
            body: body.into(),
        }
    }
}
