//! What the async front ends (REST, Redis) share around the client: their tokio runtime, whose
//! workers spin before they park (`spinwatch`) and may queue data-node requests until they run
//! out of work (`set_defer_sends`), and binding their port with a clear error.

use std::net::SocketAddr;

/// A multi-thread runtime of `threads` workers named `name`. With `defer_sends`, data-node
/// requests of every task a worker runs in one pass leave in one write when it runs out of work.
pub fn runtime(threads: usize, name: &str, defer_sends: bool) -> Result<tokio::runtime::Runtime, String> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(threads.max(1)).enable_io().enable_time().thread_name(name).on_thread_park(|| {
        crate::spinwatch::park_spin();
    });
    if defer_sends {
        b.on_thread_start(|| crate::set_defer_sends(true));
    }
    b.build().map_err(|e| e.to_string())
}

/// Binds `addr` for the front end `what`; a taken port is said so.
pub async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("cannot listen on {addr} ({what}): the port is already in use")
        } else {
            format!("cannot listen on {addr} ({what}): {e}")
        }
    })
}

/// The next client connection, ready for a request/response protocol: TCP_NODELAY on (without it
/// a client waits for delayed ACKs) and watched by the spin-before-park hook. Accept errors (for
/// example out of descriptors) are logged and retried after a short pause.
pub async fn accept(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                crate::spinwatch::watch(std::os::fd::AsRawFd::as_raw_fd(&stream));
                return (stream, peer);
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
