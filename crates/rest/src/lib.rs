//! RonDB-compatible REST API (rdrs2, API version 0.1.0) over the native client: pk-read, batch,
//! batchwrite, batchdelete, health, ping and Prometheus metrics. A thin adapter: parse, validate
//! in RonDB's order, build one batch of key operations, execute, encode. It never reaches into
//! data-node internals (architecture.md §9).
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

pub struct RestServer {
    pub client: Client,
    pub opts: RestOptions,
    metrics: Metrics,
    keys: Option<apikey::ApiKeys>,
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

fn error(e: RestError) -> Resp {
    text(e.status, e.message)
}

impl RestServer {
    pub fn new(client: Client, opts: RestOptions) -> Arc<RestServer> {
        let keys = opts.api_keys.then(|| apikey::ApiKeys::new(client.clone(), opts.api_key_refresh));
        Arc::new(RestServer { client, opts, metrics: Metrics::default(), keys })
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
        if path == "/metrics" && method == Method::GET {
            return ("metrics", text(200, self.metrics.render()));
        }
        let Some(rest) = path.strip_prefix("/0.1.0/") else {
            return ("unknown", text(404, "Not Found"));
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match (method.clone(), parts.as_slice()) {
            (Method::GET, ["health"]) => ("health", self.empty_body_check(req, "Health", "1").await),
            (Method::GET, ["ping"]) => ("ping", self.empty_body_check(req, "Ping", "").await),
            (Method::POST, ["batch"]) => ("batch", self.batch(key, req).await.unwrap_or_else(error)),
            (Method::POST, ["batchwrite"]) => {
                ("batchwrite", self.batch_write(key, req, false).await.unwrap_or_else(error))
            }
            (Method::POST, ["batchdelete"]) => {
                ("batchdelete", self.batch_write(key, req, true).await.unwrap_or_else(error))
            }
            (Method::POST, [db, table, "pk-read"]) => {
                let r = async {
                    let db = api::percent_decode(db)?;
                    let table = api::percent_decode(table)?;
                    self.pk_read(&db, &table, key, req).await
                };
                ("pk-read", r.await.unwrap_or_else(error))
            }
            _ => ("unknown", text(404, "Not Found")),
        }
    }

    async fn empty_body_check(&self, req: Request<Incoming>, what: &str, ok: &'static str) -> Resp {
        match self.body(req).await {
            Ok(b) if b.is_empty() => text(200, ok),
            Ok(_) => text(400, format!("{what} Request should be empty")),
            Err(e) => error(e),
        }
    }

    async fn pk_read(
        &self,
        db: &str,
        table: &str,
        key: Option<&str>,
        req: Request<Incoming>,
    ) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        let body = api::parse_read_body(&text)?;
        let spec = api::validate_read(db, table, &body, &self.opts)?;
        self.authorize(key, &[db]).await?;
        let read = api::resolve_read(&self.client, spec)?;
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
        let ops = api::parse_envelope(&text, &self.opts)?;
        // Whole-request validation first (RonDB fails the request on any body error) ...
        let mut specs = Vec::with_capacity(ops.len());
        for (db, table, kind, raw) in &ops {
            let body = api::parse_read_body(raw.get())?;
            if kind != "pk-read" {
                return Err(RestError::bad_request(format!(
                    "Error: Field validation for 'RelativeURL' failed: '{kind}' is not pk-read"
                )));
            }
            specs.push(api::validate_read(db, table, &body, &self.opts)?);
        }
        let dbs: Vec<&str> = ops.iter().map(|o| o.0.as_str()).collect();
        self.authorize(key, &dbs).await?;
        // ... then per-operation schema checks, which fail only their operation.
        let subs = specs
            .into_iter()
            .map(|s| {
                let id = s.operation_id.clone();
                match api::resolve_read(&self.client, s) {
                    Ok(r) => api::SubOp::Read(r),
                    Err(e) => api::SubOp::Failed(e, id),
                }
            })
            .collect();
        let mut out = String::with_capacity(256);
        api::run_batch(&self.client, subs, &mut out).await?;
        Ok(json(200, out))
    }

    async fn batch_write(&self, key: Option<&str>, req: Request<Incoming>, delete: bool) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        let ops = api::parse_envelope(&text, &self.opts)?;
        let dbs: Vec<&str> = ops.iter().map(|o| o.0.as_str()).collect();
        self.authorize(key, &dbs).await?;
        let mut subs = Vec::with_capacity(ops.len());
        for (db, table, kind, body) in &ops {
            let allowed = if delete {
                kind == "pk-delete"
            } else {
                matches!(kind.as_str(), "pk-write" | "pk-update" | "pk-insert" | "pk-delete")
            };
            if !allowed {
                return Err(RestError::bad_request(format!(
                    "Error: Field validation for 'RelativeURL' failed: '{kind}' is not allowed here"
                )));
            }
            let body: serde_json::Value = serde_json::from_str(body.get())
                .map_err(|e| RestError::bad_request(format!("Error: the request body is not valid JSON: {e}")))?;
            subs.push(api::resolve_write(&self.client, db, table, kind, &body, &self.opts)?);
        }
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
