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
//!
//! Whatever a client sends, the server stays up (`conn`): at most `max_connections` are open
//! (one more is answered 503), idle and slow connections are closed by deadlines, a panic in a
//! handler answers that request 500, and malformed requests get hyper's 4xx answer. hyper's
//! `pipeline_flush` is off: with it, hyper drops its own error answer when unread input follows
//! (and with it the answers to earlier pipelined requests still buffered).

pub mod api;
pub mod apikey;
pub mod config;
pub mod conn;
pub mod error;
pub mod feature_store;
pub mod json;
mod metrics;
pub mod request;
pub mod ronsql;
pub mod status;
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
use tern_client::tls::Reloading;

/// Time allowed for a TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
    metrics: Arc<Metrics>,
    conns: tern_client::frontend::ConnLimit,
    rejecting: tern_client::frontend::ConnLimit,
    bodies: conn::BodyBudget,
    over_cap: Arc<Vec<u8>>,
    keys: Option<apikey::ApiKeys>,
    misses: api::MissRefresh,
    /// Feature views' metadata (`feature_store`).
    fs_cache: feature_store::Cache,
    /// RonSQL queries running now (at most `ronsql::RUNNING_MAX`).
    ronsql_running: tern_client::frontend::ConnLimit,
    /// The counters over time, for the status page's charts.
    samples: status::Samples,
    /// Clients of the other data nodes, for their figures on the status page (by address).
    node_clients: std::sync::Mutex<std::collections::HashMap<String, Client>>,
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

/// The bytes a request's body may take: its announced length, the size limit when chunked, and
/// nothing when announced over the limit (it is refused without being read).
fn body_share(req: &Request<Incoming>, limit: usize) -> usize {
    match hyper::body::Body::size_hint(req.body()).exact() {
        Some(n) => usize::try_from(n).ok().filter(|&n| n <= limit).unwrap_or(0),
        None => limit,
    }
}

/// A RonSQL query's error: its class's status, the class headers and the text body.
fn ronsql_error(e: &tern_sql::ronsql::RonSqlError) -> Resp {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "text/plain; charset=utf-8")
        .header("x-ronsql-error-class", e.class.name());
    if let Some(code) = e.ndb_error {
        b = b.header("x-ronsql-ndb-error", code.to_string());
    }
    b.body(Full::new(Bytes::from(e.body()))).expect("valid response")
}

fn error(v: Version, e: RestError) -> Resp {
    match v {
        Version::V1 => text(e.status, e.message),
        Version::V2 => json(e.status, e.to_json()),
    }
}

impl RestServer {
    pub fn new(client: Client, opts: RestOptions) -> Arc<RestServer> {
        let keys =
            opts.api_keys.then(|| apikey::ApiKeys::new(client.clone(), opts.api_key_refresh, opts.key_rate_limit));
        let conns = tern_client::frontend::ConnLimit::new(opts.max_connections);
        let rejecting = tern_client::frontend::ConnLimit::new(conn::REJECTING_MAX);
        let over_cap = Arc::new(conn::over_cap_response(opts.max_connections));
        let bodies = conn::BodyBudget::new(opts.body_memory_max.max(opts.req_buffer_size));
        Arc::new(RestServer {
            client,
            opts,
            metrics: Arc::default(),
            conns,
            rejecting,
            bodies,
            over_cap,
            keys,
            misses: api::MissRefresh::default(),
            fs_cache: Default::default(),
            ronsql_running: tern_client::frontend::ConnLimit::new(ronsql::RUNNING_MAX),
            samples: Default::default(),
            node_clients: Default::default(),
        })
    }

    /// Samples the counters every `status::SAMPLE_EVERY` while the server lives.
    async fn sample_loop(me: std::sync::Weak<RestServer>) {
        loop {
            {
                let Some(s) = me.upgrade() else { return };
                let (requests, errors, latency_s) = status::totals(&s.metrics.render(s.conns.open()));
                let at_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                s.samples.push(status::Sample { at_ms, requests, errors, latency_s });
            }
            tokio::time::sleep(status::SAMPLE_EVERY).await;
        }
    }

    /// `GET /status.json`: what the status page shows.
    async fn status_json(&self, key: Option<&str>) -> Resp {
        use serde_json::json;
        if let Some(k) = &self.keys
            && let Err(e) = k.check(key, &[]).await
        {
            return json(e.status, json!({ "error": e.message }).to_string());
        }
        let st = match self.client.status_async().await {
            Ok(s) => s,
            Err(e) => return json(200, json!({ "error": e.message }).to_string()),
        };
        let mut catalog = self.client.catalog();
        if st.table_rows.iter().any(|(t, _)| !catalog.tables.contains_key(t)) {
            let _ = self.client.refresh_catalog_async().await;
            catalog = self.client.catalog();
        }
        let own = json!({
            "id": st.node_id, "state": st.state, "memory_used": st.memory_used,
            "memory_total": st.memory_total, "rows": st.rows,
            "current_epoch": st.current_epoch, "durable_epoch": st.durable_epoch,
        });
        // Every data node of the cluster (as the management nodes say), the one this server
        // uses with its figures.
        let cluster = tern_client::metrics::cluster_nodes();
        let nodes: Vec<serde_json::Value> = if cluster.is_empty() {
            vec![own]
        } else {
            let mut nodes = Vec::with_capacity(cluster.len());
            for n in &cluster {
                if n.id == st.node_id {
                    nodes.push(own.clone());
                    continue;
                }
                let figures = match n.state.as_str() {
                    "started" | "copying" => self.node_status(&n.addr).await,
                    _ => None,
                };
                nodes.push(match figures {
                    Some(o) => json!({
                        "id": n.id, "state": n.state, "addr": n.addr, "memory_used": o.memory_used,
                        "memory_total": o.memory_total, "rows": o.rows,
                        "current_epoch": o.current_epoch, "durable_epoch": o.durable_epoch,
                    }),
                    None => json!({ "id": n.id, "state": n.state, "addr": n.addr }),
                });
            }
            nodes
        };
        let bytes: std::collections::HashMap<u32, u64> = st.table_bytes.iter().copied().collect();
        let tables: Vec<serde_json::Value> = st
            .table_rows
            .iter()
            .filter_map(|(t, rows)| {
                let table = catalog.tables.get(t).filter(|table| table.database != apikey::KEY_DB)?;
                let memory = bytes.get(t).copied().unwrap_or(0);
                Some(json!({ "name": format!("{}.{}", table.database, table.name), "rows": rows, "memory": memory }))
            })
            .collect();
        let series: Vec<[f64; 4]> = self.samples.series().iter().map(|&(t, r, e, l)| [t as f64, r, e, l]).collect();
        let errors: Vec<serde_json::Value> = tern_client::metrics::recent_errors()
            .iter()
            .map(|e| json!({ "at_ms": e.at_ms, "front_end": e.front_end, "text": e.text }))
            .collect();
        json(200, json!({ "nodes": nodes, "tables": tables, "series": series, "errors": errors }).to_string())
    }

    /// Another data node's status for the status page (its client made on first use, off the
    /// event loop; None when connecting or answering takes more than a second).
    async fn node_status(&self, addr: &str) -> Option<tern_client::StatusInfo> {
        let wait = std::time::Duration::from_secs(1);
        let known = self.node_clients.lock().unwrap_or_else(|e| e.into_inner()).get(addr).cloned();
        let c = match known {
            Some(c) => c,
            None => {
                let a = addr.to_string();
                let connect = tokio::task::spawn_blocking(move || Client::connect(&a));
                let c = tokio::time::timeout(wait, connect).await.ok()?.ok()?.ok()?;
                self.node_clients.lock().unwrap_or_else(|e| e.into_inner()).insert(addr.to_string(), c.clone());
                c
            }
        };
        tokio::time::timeout(wait, c.status_async()).await.ok()?.ok()
    }

    /// Serves on an already bound listener until the process ends (over TLS with an acceptor).
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener, tls: Option<Arc<Reloading>>) {
        tokio::spawn(RestServer::sample_loop(Arc::downgrade(&self)));
        loop {
            let (stream, peer) = tern_client::frontend::accept(&listener).await;
            let me = self.clone();
            let Some(slot) = self.conns.try_acquire() else {
                self.metrics.conn_rejected();
                me.reject(stream, tls.as_ref().map(|t| t.acceptor()));
                continue;
            };
            match &tls {
                None => {
                    tokio::spawn(async move {
                        me.serve_conn(stream).await;
                        drop(slot);
                    });
                }
                Some(reloading) => {
                    let accept = reloading.acceptor().accept(stream);
                    tokio::spawn(async move {
                        // A client that never finishes its handshake does not hold a task forever.
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, accept).await {
                            Ok(Ok(s)) => me.serve_conn(s).await,
                            Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                        drop(slot);
                    });
                }
            }
        }
    }

    /// Answers a connection over the cap with 503 (over TLS when the port speaks TLS). Only
    /// `conn::REJECTING_MAX` answers linger at once; beyond that the answer is written without
    /// waiting (plain TCP) or the connection is closed (TLS, which would need a handshake).
    fn reject(
        self: Arc<Self>,
        stream: tokio::net::TcpStream,
        tls: Option<tern_client::tls::tokio_rustls::TlsAcceptor>,
    ) {
        let Some(slot) = self.rejecting.try_acquire() else {
            if tls.is_none() {
                let _ = stream.try_write(&self.over_cap);
            }
            return;
        };
        let answer = self.over_cap.clone();
        tokio::spawn(async move {
            match tls {
                None => conn::reject(stream, answer).await,
                Some(acceptor) => {
                    if let Ok(Ok(s)) = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        conn::reject(s, answer).await;
                    }
                }
            }
            drop(slot);
        });
    }

    /// One HTTP/1.1 connection (keep-alive, pipelined requests answered in order) under its
    /// deadlines.
    async fn serve_conn<S>(self: Arc<Self>, stream: S)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let clock = Arc::new(conn::ConnClock::new(self.opts.idle_timeout, self.opts.header_read_timeout));
        let io = hyper_util::rt::TokioIo::new(conn::Watched::new(stream, clock.clone(), self.metrics.clone()));
        let svc = hyper::service::service_fn(move |req| {
            let me = self.clone();
            let in_flight = clock.request();
            async move {
                let resp = match conn::CatchPanic::new(me.handle(req)).await {
                    Ok(r) => r,
                    Err(msg) => {
                        me.metrics.handler_panicked();
                        tracing::error!("REST request handler panicked: {msg}");
                        conn::panic_response()
                    }
                };
                drop(in_flight);
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        // half_close: a client that shuts its write side after a request still gets the answer.
        let _ = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .half_close(true)
            .serve_connection(io, svc)
            .await;
    }

    async fn handle(&self, req: Request<Incoming>) -> Resp {
        let started = Instant::now();
        // The body's share of the memory budget is held until the answer is made.
        let Some(_share) = self.bodies.reserve(body_share(&req, self.opts.req_buffer_size)) else {
            let resp = text(503, "Service Unavailable: too many request bodies in flight, retry later");
            self.metrics.record("busy", 503, started.elapsed());
            return resp;
        };
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
        let collect = Limited::new(req.into_body(), limit).collect();
        match tokio::time::timeout(self.opts.header_read_timeout, collect).await {
            Ok(Ok(b)) => Ok(b.to_bytes()),
            Ok(Err(_)) => Err(RestError::bad_request("Request too large")),
            Err(_) => {
                self.metrics.conn_timed_out();
                Err(RestError::new(408, "Request Timeout: the request body did not arrive in time"))
            }
        }
    }

    /// The request body as UTF-8 text (JSON is parsed where its shape is known).
    async fn text_body(&self, req: Request<Incoming>) -> Result<String, RestError> {
        let b = self.body(req).await?;
        String::from_utf8(Vec::from(b))
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
                Method::GET => ("metrics", text(200, self.metrics.render(self.conns.open()))),
                _ => ("unknown", text(405, "Method Not Allowed")),
            };
        }
        if path == "/" || path == "/status" || path == "/status.json" {
            if method != Method::GET {
                return ("unknown", text(405, "Method Not Allowed"));
            }
            if path == "/status.json" {
                return ("status", self.status_json(key).await);
            }
            let page = Response::builder()
                .status(200)
                .header("content-type", "text/html; charset=utf-8")
                .body(Full::new(Bytes::from_static(status::PAGE.as_bytes())))
                .expect("valid response");
            return ("status", page);
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
            ["ronsql"] => ("ronsql", &[Method::POST]),
            ["feature_store"] => ("feature_store", &[Method::POST]),
            ["batch_feature_store"] => ("batch_feature_store", &[Method::POST]),
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
            "ronsql" => self.ronsql(key, req).await,
            "feature_store" => self.feature_store(key, req, false).await,
            "batch_feature_store" => self.feature_store(key, req, true).await,
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
        self.misses.ensure_known(&self.client, std::iter::once((db.as_str(), table.as_str()))).await?;
        let read = api::resolve_read(&self.client, &mut api::Tables::default(), spec)?;
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

    async fn ronsql(&self, key: Option<&str>, req: Request<Incoming>) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        let p = ronsql::parse(&text)?;
        self.authorize(key, &[&p.database]).await?;
        ronsql::check_operation_id(&p, self.opts.operation_id_max_size)?;
        let Some(_running) = self.ronsql_running.try_acquire() else {
            return Ok(ronsql_error(&tern_sql::ronsql::RonSqlError {
                class: tern_sql::ronsql::ErrorClass::Resource,
                message: format!("too many RonSQL queries running (at most {}), retry later", ronsql::RUNNING_MAX),
                ndb_error: None,
            }));
        };
        // A table this API server has not seen yet: refresh the catalog once (a missing table
        // is then the query's own error).
        if let Ok((db, table)) = tern_sql::ronsql::table_of(&p.query) {
            let db = db.unwrap_or_else(|| p.database.clone());
            let _ = self.misses.ensure_known(&self.client, std::iter::once((db.as_str(), table.as_str()))).await;
        }
        match tern_sql::ronsql::run(&self.client, &ronsql::query(&p), ronsql::budget()).await {
            Ok(a) => Ok(Response::builder()
                .status(StatusCode::OK)
                .header("content-type", a.content_type)
                .body(Full::new(Bytes::from(a.body)))
                .expect("valid response")),
            Err(e) => Ok(ronsql_error(&e)),
        }
    }

    async fn feature_store(&self, key: Option<&str>, req: Request<Incoming>, batch: bool) -> Result<Resp, RestError> {
        use feature_store::{Answer, HOPSWORKS};
        let body = self.text_body(req).await?;
        let answer = match feature_store::parse(&body, batch) {
            Err(a) => a,
            Ok(r) => {
                let metadata = ["feature_store", "feature_view", "training_dataset_join", "training_dataset_feature"]
                    .into_iter()
                    .chain(["feature_group", "serving_key"]);
                let _ = self.misses.ensure_known(&self.client, metadata.map(|t| (HOPSWORKS, t))).await;
                match self.fs_cache.view(&self.client, &r).await {
                    Err(e) => Answer::Error(e),
                    Ok(view) => {
                        let stores: Vec<&str> = view.stores.iter().map(|s| s.as_str()).collect();
                        if let Err(e) = self.authorize(key, &stores).await {
                            Answer::Error(feature_store::FsError {
                                code: feature_store::FEATURE_STORE_NOT_SHARED.0,
                                reason: feature_store::FEATURE_STORE_NOT_SHARED.1,
                                message: e.message,
                                status: 401,
                            })
                        } else {
                            let _ = self.misses.ensure_known(&self.client, view.online_tables()).await;
                            feature_store::serve(&self.client, &view, &r, batch).await
                        }
                    }
                }
            }
        };
        Ok(match answer {
            Answer::Text(status, t) => text(status, t),
            Answer::Error(e) => json(e.status, e.body()),
            Answer::Json(body) => json(200, body),
        })
    }

    async fn batch(&self, key: Option<&str>, req: Request<Incoming>) -> Result<Resp, RestError> {
        let text = self.text_body(req).await?;
        // Whole-request parsing and validation first (rdrs2 fails the request on any of it) ...
        let specs = request::batch_read(&text, &self.opts)?;
        let dbs: Vec<&str> = specs.iter().map(|s| s.db.as_str()).collect();
        self.authorize(key, &dbs).await?;
        self.misses.ensure_known(&self.client, specs.iter().map(|s| (s.db.as_str(), s.table.as_str()))).await?;
        // ... then per-operation schema checks, which fail only their operation.
        let mut tables = api::Tables::default();
        let subs = specs
            .into_iter()
            .map(|s| {
                let id = s.operation_id.clone();
                match api::resolve_read(&self.client, &mut tables, s) {
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
        self.misses.ensure_known(&self.client, specs.iter().map(|s| (s.db.as_str(), s.table.as_str()))).await?;
        let mut tables = api::Tables::default();
        let subs = specs.into_iter().map(|s| api::resolve_write(&self.client, &mut tables, s)).collect();
        let mut out = String::with_capacity(256);
        api::run_batch(&self.client, subs, &mut out).await?;
        Ok(json(200, out))
    }
}

/// Binds the REST port (a clear error when it is taken) and serves on a runtime of
/// `opts.threads` workers, blocking this thread until the process ends.
pub fn run(
    connect: impl FnOnce() -> Result<Client, String>,
    opts: RestOptions,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    run_on(None, connect, opts, ready)
}

/// `run`; with `Some(rt)` the connections are served by that runtime (one that already runs
/// elsewhere: the thread of a data-node worker that hosts front ends).
pub fn run_on(
    rt: Option<tokio::runtime::Handle>,
    connect: impl FnOnce() -> Result<Client, String>,
    opts: RestOptions,
    ready: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    run_on_boxed(rt, Box::new(connect), opts, Box::new(ready))
}

/// `run_on`'s body. Not generic, so that the server's futures (and RonSQL's and the feature
/// store's below them) are compiled once, in this crate, rather than again in every crate and
/// test that starts it (futures are instantiated where they are polled).
fn run_on_boxed(
    rt: Option<tokio::runtime::Handle>,
    connect: tern_client::frontend::Connect<'_>,
    opts: RestOptions,
    ready: tern_client::frontend::Ready<'_>,
) -> Result<(), String> {
    tern_client::spinwatch::set_spin(opts.spin);
    // Certificate problems are reported before anything starts.
    let acceptor = opts.tls.as_ref().map(tls::acceptor).transpose()?.map(Arc::new);
    let own = (opts.threads, "tern-rest", true);
    let serve = move |client, bound| serve(client, opts, acceptor, bound);
    tern_client::frontend::run_front_end(rt, own, "REST", connect, serve, ready)
}

/// Binds, says where (`bound`), and serves until the process ends.
async fn serve(
    client: Client,
    opts: RestOptions,
    acceptor: Option<Arc<Reloading>>,
    bound: impl FnOnce(std::net::SocketAddr),
) -> Result<(), String> {
    let listener = tern_client::frontend::bind(opts.listen, "REST").await?;
    bound(listener.local_addr().map_err(|e| e.to_string())?);
    RestServer::new(client, opts).serve(listener, acceptor).await;
    Ok(())
}
