//! The HTTP ports, as the peer serves them. The main port (HOST:PORT): `GET /healthcheck` (200
//! `OK` while healthy as `health.rs` says, else 500), `POST /json` (`json.rs`) and `GET /metrics`.
//! The Prometheus port (USE_PROMETHEUS, PROMETHEUS_ADDR): PROMETHEUS_PATH. The debug port
//! (DEBUG_HOST:DEBUG_PORT): `/rlconfig`, `/stats` (`debug.rs`). A few lines of HTTP/1.1 over a
//! socket, one request per connection: a handful of fixed routes need no framework.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::health::Health;
use crate::reply::Reply;
use crate::service::Service;
use crate::{debug, json};

/// What a port answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    Main,
    Prometheus,
    Debug,
}

/// Serves one port. A request's head and body are read up to `max_request_bytes`
/// (RLS_HTTP_MAX_REQUEST_BYTES); a longer one is answered 413.
pub async fn serve(
    listener: TcpListener,
    port: Port,
    service: Arc<Service>,
    health: Arc<Health>,
    max_request_bytes: usize,
) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        // One write and a close per request: no small write may wait for an ACK.
        let _ = socket.set_nodelay(true);
        let (service, health) = (service.clone(), health.clone());
        tokio::spawn(async move {
            let reply = match read(&mut socket, max_request_bytes).await {
                Ok((method, path, body)) => {
                    route(port, &service, &health, &method, &path, &body).await
                }
                Err(reply) => reply,
            };
            let response = format!(
                "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                reply.status,
                reply.kind,
                reply.body.len(),
                reply.body
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

/// The request line's method and path, and the body (by its content-length).
async fn read(
    socket: &mut tokio::net::TcpStream,
    max: usize,
) -> Result<(String, String, Vec<u8>), Reply> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() >= max {
            return Err(Reply::text("413 Payload Too Large", "request too large"));
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Reply::text("400 Bad Request", "incomplete request")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let path = words.next().unwrap_or("");
    let path = path.split('?').next().unwrap_or("").to_string();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    if head_end.saturating_add(length) > max {
        return Err(Reply::text("413 Payload Too Large", "request too large"));
    }
    while buf.len() < head_end + length {
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Reply::text("400 Bad Request", "incomplete body")),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = buf
        .get(head_end..head_end + length)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    Ok((method, path, body))
}

async fn route(
    port: Port,
    service: &Arc<Service>,
    health: &Health,
    method: &str,
    path: &str,
    body: &[u8],
) -> Reply {
    let metrics_path = service.settings().prometheus_path.as_str();
    match (port, method, path) {
        (Port::Main, "GET", "/healthcheck") => {
            if health.ok() {
                Reply::text("200 OK", "OK")
            } else {
                Reply::text("500 Internal Server Error", "NOT OK")
            }
        }
        (Port::Main, "POST", "/json") => json::answer(service, body).await,
        (Port::Main, "GET", "/metrics") | (Port::Prometheus, "GET", _)
            if port == Port::Main || path == metrics_path =>
        {
            Reply {
                status: "200 OK",
                kind: "text/plain; version=0.0.4",
                body: service.metrics.render(),
            }
        }
        (Port::Debug, "GET", "/") => Reply::text("200 OK", debug::INDEX),
        (Port::Debug, "GET", "/rlconfig") => Reply::text("200 OK", debug::config(service)),
        (Port::Debug, "GET", "/stats") => Reply::text("200 OK", debug::stats(service)),
        _ => Reply::text("404 Not Found", "not found"),
    }
}
