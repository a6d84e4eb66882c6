//! RonDB-compatible REST API (rdrs2, API versions 0.1.0 and 0.2.0) over the native client:
//! pk-read, batch, batchwrite, batchdelete, health, ping and Prometheus metrics. A thin adapter:
//! parse, validate in RonDB's order (`request`), build one batch of key operations, execute,
//! encode (`api`). It never reaches into data-node internals (architecture.md §9).
//!
//! The two API versions serve the same endpoints; errors are plain text under 0.1.0 and JSON
//! under 0.2.0 (`RestError::to_json`).
//!
//! HTTP/1.1 with keep-alive and pipelining (hyper); TCP_NODELAY on every accepted socket; request
//! bodies are bounded by `Internal.ReqBufferSize`. Concurrent requests share the client's
//! connections, whose writes are batched across callers.

pub mod api;
pub mod apikey;
pub mod config;
pub mod error;
pub mod json;
mod metrics;
pub mod request;
pub mod tls;

use crate::config::RestOptions;
use crate::error::RestError;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use metrics::Metrics;
use std::sync::Arc;
use std::time::Instant;
use tern_client::Client;

/// The API version in every data path.
pub const API_VERSION: &str = "0.1.0";
/// The second API version rdrs2 serves: the same endpoints, errors as JSON.
pub const API_VERSION_2: &str = "0.2.0";

/// Which API version a request used: it decides how errors are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

pub struct RestServer {
    pub client: Client,
    pub opts: RestOptions,
    metrics: Metrics,
    keys: Option<apikey::ApiKeys>,
    misses: api::MissRefresh,
}

type Resp = Response<Full<Bytes>>;

fn text(status: u16, body: impl Into<Bytes>) -> Resp {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(body.into()))
        .expect("valid response")
}

fn json(status: u16, body: String) -> Resp {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

fn error(v: Version, e: RestError) -> Resp {
    match v {
        Version::V1 => text(e.status, e.message),
        Version::V2 => json(e.status, e.to_json()),
    }
}

impl RestServer {
    pub fn new(client: Client, opts: RestOptions) -> Arc<RestServer> {
        let keys = opts.api_keys.then(|| apikey::ApiKeys::new(client.clone(), opts.api_key_refresh));
        Arc::new(RestServer { client, opts, metrics: Metrics::default(), keys, misses: api::MissRefresh::default() })
    }

    /// Serves on an already bound listener until the process ends (over TLS with an acceptor).
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
        loop {
            let (stream, peer) = tern_client::frontend::accept(&listener).await;
            let me = self.clone();
            match &tls {
                None => {
                    tokio::spawn(me.serve_conn(stream));
                }
                Some(acceptor) => {
                    let accept = acceptor.accept(stream);
                    tokio::spawn(async move {
                        // A client that never finishes its handshake does not hold a task forever.
                        match tokio::time::timeout(std::time::Duration::from_secs(10), accept).await {
                            Ok(Ok(s)) => me.serve_conn(s).await,
                            Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    });
                }
            }
        }
    }

    /// One HTTP/1.1 connection (keep-alive, pipelined requests answered in order).
    async fn serve_conn<S>(self: Arc<Self>, stream: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let svc = hyper::service::service_fn(move |req| {
            let me = self.clone();
            async move { Ok::<_, std::convert::Infallible>(me.handle(req).await) }
        });
        let io = hyper_util::rt::TokioIo::new(stream);
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .pipeline_flush(true)
            .serve_connection(io, svc)
            .await;
    }

    async fn handle(&self, req: Request<Incoming>) -> Resp {
        let started = Instant::now();
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let key = req.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_string);
        let (endpoint, resp) = self.route(method, &path, key.as_deref(), req).await;
        self.metrics.record(endpoint, resp.status().as_u16(), started.elapsed());
        resp
    }

    async fn body(&self, req: Request<Incoming>) -> Result<Bytes, RestError> {
        let limit = self.opts.req_buffer_size;
        if let Some(len) =
            req.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok())
            && len > limit
        {
            return Err(RestError::bad_request("Request too large"));
        }
        match Limited::new(req.into_body(), limit).collect().await {
            Ok(b) => Ok(b.to_bytes()),
            Err(_) => Err(RestError::bad_request("Request too large")),
        }
    }

    /// The request body as UTF-8 text (JSON is parsed where its shape is known).
    async fn text_body(&self, req: Request<Incoming>) -> Result<String, RestError> {
        let b = self.body(req).await?;
        String::from_utf8(b.to_vec())
            .map_err(|_| RestError::bad_request("Error: the request body is not valid JSON: invalid UTF-8"))
    }

    /// Checks the API key (when keys are on) for the databases a request touches.
    async fn authorize(&self, key: Option<&str>, dbs: &[&str]) -> Result<(), RestError> {
        match &self.keys {
            None => Ok(()),
            Some(k) => k.check(key, dbs).await,
        }
    }

    async fn route(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        req: Request<Incoming>,
    ) -> (&'static str, Resp) {
        if path == "/metrics" {
            return match method {
                Method::GET => ("metrics", text(200, self.metrics.render())),
                _ => ("unknown", text(405, "Method Not Allowed")),
            };
        }
        let (v, rest) = if let Some(r) = path.strip_prefix("/0.1.0/") {
            (Version::V1, r)
        } else if let Some(r) = path.strip_prefix("/0.2.0/") {
            (Version::V2, r)
        } else {
            return ("unknown", text(404, "Not Found"));
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let (endpoint, allowed): (&'static str, &[Method]) = match parts.as_slice() {
            ["health"] => ("health", &[Method::GET]),
            ["ping"] => ("ping", &[Method::GET]),
            ["batch"] => ("batch", &[Method::POST]),
            ["batchwrite"] => ("batchwrite", &[Method::POST]),
            // rdrs2 registers DELETE; Tern also keeps POST, which it documented first.
            ["batchdelete"] => ("batchdelete", &[Method::DELETE, Method::POST]),
            [_, _, "pk-read"] => ("pk-read", &[Method::POST]),
            _ => return ("unknown", text(404, "Not Found")),
        };
        if !allowed.contains(&method) {
            return ("unknown", text(405, "Method Not Allowed"));
        }
        let r = match endpoint {
            "health" => return (endpoint, self.empty_body_check(v, req, "Health", "1").await),
            "ping" => return (endpoint, self.empty_body_check(v, req, "Ping", "").await),
            "batch" => self.batch(key, req).await,
            "batchwrite" => self.batch_write(key, req, request::Batch::Write).await,
            "batchdelete" => self.batch_write(key, req, request::Batch::Delete).await,
            _ => self.pk_read(parts[0], parts[1], key, req).await,
        };
        (endpoint, r.unwrap_or_else(|e| error(v, e)))
    }

    async fn empty_body_check(&self, v: Version, req: Request<Incoming>, what: &str, ok: &'static str) -> Resp {
        match self.body(req).await {
            Ok(b) if b.is_empty() => text(200, ok),
            Ok(_) => error(v, RestError::bad_request(format!("{what} Request should be empty"))),
            Err(e) => error(v, e),
        }
    }

    async fn pk_read(
        &self,
        db: &str,
        table: &str,
        key: Option<&str>,
        req: Request<Incoming>,
    ) -> Result<Resp, RestError> {
        let db = api::percent_decode(db)?;
        let table = api::percent_decode(table)?;
        let text = self.text_body(req).await?;
        let spec = request::pk_read(&db, &table, &text, &self.opts)?;
        self.authorize(key, &[&db]).await?;
        let read = api::resolve_read(&self.client, &self.misses, spec)?;
        let mut txn = self.client.begin();
        let r = txn.execute(vec![read.op.clone()], tern_client::Exec::Commit).await.map_err(RestError::from)?;
        match r.into_iter().next() {
            Some(tern_client::OpResult::Row(bytes)) => {
                let mut out = String::with_capacity(128);
                api::read_body(&read, &bytes, &mut out)?;
                Ok(json(200, out))
            }
            Some(tern_client::OpResult::NotFound) => Err(RestError::not_found("Not Found")),
            Some(tern_client::OpResult::Error(e)) => Err(e.into()),
            _ => Err(RestError::new(500, "the data node returned no result")),
        }
    }

    async fn batch(&self, key: Option<&str>, req: Request<Incoming>) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        // Whole-request parsing and validation first (rdrs2 fails the request on any of it) ...
        let specs = request::batch_read(&text, &self.opts)?;
        let dbs: Vec<&str> = specs.iter().map(|s| s.db.as_str()).collect();
        self.authorize(key, &dbs).await?;
        // ... then per-operation schema checks, which fail only their operation.
        let subs = specs
            .into_iter()
            .map(|s| {
                let id = s.operation_id.clone();
                match api::resolve_read(&self.client, &self.misses, s) {
                    Ok(r) => api::SubOp::Read(r),
                    Err(e) => api::SubOp::Failed(e, id),
                }
            })
            .collect();
        let mut out = String::with_capacity(256);
        api::run_batch(&self.client, subs, &mut out).await?;
        Ok(json(200, out))
    }

    async fn batch_write(
        &self,
        key: Option<&str>,
        req: Request<Incoming>,
        batch: request::Batch,
    ) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        let specs = request::batch_write(&text, batch, &self.opts)?;
        let dbs: Vec<&str> = specs.iter().map(|s| s.db.as_str()).collect();
        self.authorize(key, &dbs).await?;
        let subs = specs.into_iter().map(|s| api::resolve_write(&self.client, &self.misses, s)).collect();
        let mut out = String::with_capacity(256);
        api::run_batch(&self.client, subs, &mut out).await?;
        Ok(json(200, out))
    }
}

/// Binds the REST port (a clear error when it is taken) and serves on a runtime of
/// `opts.threads` workers, blocking this thread until the process ends. `connect` makes the
/// native client inside the runtime, so its connections are read by the runtime's reactor.
pub fn run(
    connect: impl FnOnce() -> Result<Client, String>,
    opts: RestOptions,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    tern_client::spinwatch::set_spin(opts.spin);
    // Certificate problems are reported before anything starts.
    let acceptor = opts.tls.as_ref().map(tls::acceptor).transpose()?;
    let rt = tern_client::frontend::runtime(opts.threads, "tern-rest", true)?;
    rt.block_on(async move {
        let client = tokio::task::block_in_place(connect)?;
        let listener = tern_client::frontend::bind(opts.listen, "REST").await?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        ready(addr);
        RestServer::new(client, opts).serve(listener, acceptor).await;
        Ok(())
    })
}
