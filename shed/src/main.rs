//! `redis-ratelimit-shed --listen ADDR --upstream http://HOST:PORT [--priority-header NAME]
//! [--tenant-header NAME] …`: the load shedder as a sidecar (docs/shedding.md).

use std::collections::HashMap;
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use ratelimit_shed::proxy::{self, Sidecar};
use ratelimit_shed::settings::Settings;
use ratelimit_shed::{ByHeaders, Shedder};
use tokio::net::TcpListener;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: HashMap<String, String> = std::env::vars().collect();
    let settings = match Settings::parse(&args, &env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("redis-ratelimit-shed: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("redis-ratelimit-shed: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(settings)) {
        eprintln!("redis-ratelimit-shed: {e}");
        std::process::exit(1);
    }
}

async fn run(settings: Settings) -> Result<(), String> {
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    let shedder = Shedder::new(settings.shed.clone())?;
    let classify = ByHeaders::new(
        settings.priority_header.clone(),
        settings.tenant_header.clone(),
    );
    let sidecar = Arc::new(Sidecar::new(
        shedder,
        classify,
        &settings.upstream,
        settings.upstream_h2,
        Some(metrics),
    )?);
    let listener = TcpListener::bind(settings.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", settings.listen))?;
    // The address actually bound (port 0 picks one), for scripts and tests.
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {bound}, upstream {}", settings.upstream);
    let admin = match settings.admin_listen {
        Some(a) => {
            let l = TcpListener::bind(a)
                .await
                .map_err(|e| format!("--admin-listen {a}: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            println!("admin on {bound}");
            Some(tokio::spawn(proxy::serve_admin(l, sidecar.clone())))
        }
        None => None,
    };
    let server = tokio::spawn(proxy::serve(listener, sidecar, admin.is_none()));
    shutdown().await;
    server.abort();
    if let Some(a) = admin {
        a.abort();
    }
    Ok(())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
