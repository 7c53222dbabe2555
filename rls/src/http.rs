//! The HTTP port: `GET /healthcheck` (200 `OK` while healthy as `health.rs` says, else 500) and `GET /metrics` (Prometheus text). A few lines of HTTP/1.1 over a socket,
//! one request per connection: two fixed routes need no framework.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::health::Health;
use crate::metrics::Metrics;

pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    metrics_path: String,
) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let health = health.clone();
        let metrics_path = metrics_path.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            // The request line and headers; the body (none for GET) is not read.
            while len < buf.len() {
                match socket.read(&mut buf[len..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => len += n,
                }
                if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let path = path.split('?').next().unwrap_or("");
            let (status, kind, body) = if path == "/healthcheck" {
                if health.ok() {
                    ("200 OK", "text/plain", "OK".to_string())
                } else {
                    (
                        "500 Internal Server Error",
                        "text/plain",
                        "NOT OK".to_string(),
                    )
                }
            } else if path == metrics_path || path == "/metrics" {
                ("200 OK", "text/plain; version=0.0.4", metrics.render())
            } else {
                ("404 Not Found", "text/plain", "not found".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}
