//! The status page (`GET /` on the REST port): the data node this API server uses (state,
//! memory, rows, epochs), rows and memory per table, throughput, errors and latency of every
//! front end in this process over the last ten minutes as charts, and the recent errors. One
//! HTML document with its script and style inline (no external assets: it works offline); the
//! script polls `GET /status.json`.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

/// How often the counters are sampled for the charts.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// Samples kept (ten minutes).
pub const SAMPLES_MAX: usize = 300;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub at_ms: u64,
    /// Requests, commands and statements of every front end so far.
    pub requests: f64,
    pub errors: f64,
    /// Seconds they took together.
    pub latency_s: f64,
}

#[derive(Default)]
pub struct Samples(Mutex<VecDeque<Sample>>);

impl Samples {
    pub fn push(&self, s: Sample) {
        let mut q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= SAMPLES_MAX {
            q.pop_front();
        }
        q.push_back(s);
    }

    /// Per interval: (end ms, requests per second, errors per second, mean latency in ms).
    pub fn series(&self) -> Vec<(u64, f64, f64, f64)> {
        let q = self.0.lock().unwrap_or_else(|e| e.into_inner());
        q.iter()
            .zip(q.iter().skip(1))
            .map(|(a, b)| {
                let secs = (b.at_ms.saturating_sub(a.at_ms) as f64 / 1000.0).max(0.001);
                let n = (b.requests - a.requests).max(0.0);
                let mean_ms = if n > 0.0 { (b.latency_s - a.latency_s).max(0.0) / n * 1000.0 } else { 0.0 };
                (b.at_ms, n / secs, (b.errors - a.errors).max(0.0) / secs, mean_ms)
            })
            .collect()
    }
}

/// Totals (requests, errors, latency seconds) read from this process's exposition text: every
/// `*_duration_seconds_count` and `_sum`, every `*_command_errors_total` and
/// `*_statement_errors_total`, and REST requests answered 400 or above.
pub fn totals(exposition: &str) -> (f64, f64, f64) {
    let (mut req, mut err, mut lat) = (0.0, 0.0, 0.0);
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, v)) = line.rsplit_once(' ') else { continue };
        let Ok(v) = v.parse::<f64>() else { continue };
        let name = name_labels.split('{').next().unwrap_or("");
        if name.ends_with("_duration_seconds_count") {
            req += v;
        } else if name.ends_with("_duration_seconds_sum") {
            lat += v;
        } else if name.ends_with("_command_errors_total")
            || name.ends_with("_statement_errors_total")
            || (name == "tern_rest_requests_total" && rest_error(name_labels))
        {
            err += v;
        }
    }
    (req, err, lat)
}

/// Whether a `tern_rest_requests_total` series counts answers of status 400 or above.
fn rest_error(name_labels: &str) -> bool {
    name_labels
        .split("status=\"")
        .nth(1)
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse::<u16>().ok())
        .is_some_and(|s| s >= 400)
}

pub const PAGE: &str = r##"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Tern status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px}h1{font-size:18px;margin:0}
main{padding:16px 20px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section{background:#fff;border-radius:8px;padding:12px 16px;box-shadow:0 1px 2px #0002}
h2{font-size:15px;margin:0 0 8px}table{border-collapse:collapse;width:100%}
td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #eee}th{font-weight:600}
.ok{color:#0a7d32;font-weight:600}.bad{color:#b3261e;font-weight:600}
svg{width:100%;height:140px;background:#fbfbfc}.muted{color:#667}
#errors li{font-family:ui-monospace,monospace;font-size:12px;margin:2px 0}
</style></head><body>
<header><h1>Tern status <span id="updated" class="muted"></span></h1></header>
<main>
<section><h2>Data nodes</h2><table id="nodes"><tr><th>Node</th><th>State</th><th>Memory</th><th>Rows</th><th>Epoch (durable)</th></tr></table></section>
<section><h2>Tables</h2><table id="tables"><tr><th>Table</th><th>Rows</th><th>Memory</th></tr></table></section>
<section><h2>Throughput (requests/s)</h2><svg id="rps" viewBox="0 0 400 140" preserveAspectRatio="none"></svg><div id="rps-now" class="muted"></div></section>
<section><h2>Mean latency (ms)</h2><svg id="lat" viewBox="0 0 400 140" preserveAspectRatio="none"></svg><div id="lat-now" class="muted"></div></section>
<section><h2>Recent errors</h2><ul id="errors"></ul></section>
</main>
<script>
function bytes(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++}return b.toFixed(i?1:0)+' '+u[i]}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]))}
function rows(id,head,list){const t=document.getElementById(id);t.innerHTML=head+list.join('')}
function chart(id,pts,color){const s=document.getElementById(id);if(pts.length<2){s.innerHTML='<text x="10" y="70" fill="#667">collecting samples…</text>';return}
const max=Math.max(...pts,1e-9);const step=400/(pts.length-1);
const d=pts.map((v,i)=>(i?'L':'M')+(i*step).toFixed(1)+','+(135-v/max*125).toFixed(1)).join(' ');
s.innerHTML='<path d="'+d+'" fill="none" stroke="'+color+'" stroke-width="2"/><text x="4" y="14" fill="#667" font-size="11">max '+max.toFixed(max<10?2:0)+'</text>'}
async function refresh(){try{const r=await fetch('/status.json',{cache:'no-store'});const s=await r.json();
if(s.error){document.getElementById('updated').textContent=s.error;return}
rows('nodes','<tr><th>Node</th><th>State</th><th>Memory</th><th>Rows</th><th>Epoch (durable)</th></tr>',s.nodes.map(n=>'<tr><td>'+n.id+'</td><td class="'+(n.state=='started'?'ok':'bad')+'">'+esc(n.state)+'</td>'+(n.memory_total===undefined?'<td colspan="3" class="muted">'+esc(n.addr||'')+'</td>':'<td>'+bytes(n.memory_used)+' of '+bytes(n.memory_total)+'</td><td>'+n.rows+'</td><td>'+n.current_epoch+' ('+n.durable_epoch+')</td>')+'</tr>'));
rows('tables','<tr><th>Table</th><th>Rows</th><th>Memory</th></tr>',s.tables.map(t=>'<tr><td>'+esc(t.name)+'</td><td>'+t.rows+'</td><td>'+bytes(t.memory)+'</td></tr>'));
chart('rps',s.series.map(p=>p[1]),'#2f6fdf');chart('lat',s.series.map(p=>p[3]),'#c2570c');
const last=s.series[s.series.length-1];
document.getElementById('rps-now').textContent=last?('now '+last[1].toFixed(1)+' requests/s, '+last[2].toFixed(2)+' errors/s'):'';
document.getElementById('lat-now').textContent=last?('now '+last[3].toFixed(3)+' ms'):'';
document.getElementById('errors').innerHTML=s.errors.length?s.errors.slice().reverse().map(e=>'<li>'+new Date(e.at_ms).toLocaleTimeString()+' ['+esc(e.front_end)+'] '+esc(e.text)+'</li>').join(''):'<li class="muted">none</li>';
document.getElementById('updated').textContent='— updated '+new Date().toLocaleTimeString();
}catch(e){document.getElementById('updated').textContent='— cannot reach the API server'}}
refresh();setInterval(refresh,2000);
</script></body></html>
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_and_series() {
        let text = "# x\ntern_rest_requests_total{endpoint=\"pk-read\",status=\"200\"} 5\ntern_rest_requests_total{endpoint=\"pk-read\",status=\"404\"} 2\ntern_redis_command_duration_seconds_count{command=\"get\"} 10\ntern_redis_command_duration_seconds_sum{command=\"get\"} 0.5\ntern_redis_command_errors_total{command=\"get\"} 1\n";
        assert_eq!(totals(text), (10.0, 3.0, 0.5));
        let s = Samples::default();
        s.push(Sample { at_ms: 1000, requests: 10.0, errors: 0.0, latency_s: 0.5 });
        s.push(Sample { at_ms: 3000, requests: 30.0, errors: 2.0, latency_s: 0.7 });
        let v = s.series();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, 3000);
        assert!((v[0].1 - 10.0).abs() < 1e-9 && (v[0].2 - 1.0).abs() < 1e-9 && (v[0].3 - 10.0).abs() < 1e-9);
    }
}
