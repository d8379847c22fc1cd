//! Load benchmark of the `fake-proxmox serve` binary: 1,000 VMs over 50 nodes.
//!
//! Starts the server as a child process (once over HTTP, once over HTTPS), loads the VMs
//! through the API, then measures keep-alive clients at 1 and 64 concurrent connections:
//! `GET /cluster/resources`, `GET …/status/current`, and create + task poll. Prints
//! `name: value unit` lines and the server's peak RSS (`VmHWM` of the child).
//!
//! `cargo bench -p fake-proxmox --bench load`. Env: `BENCH_SECS` (default 3 s per measurement),
//! `BENCH_ONLY=cluster_resources,status_current,create_poll`, `BENCH_PROTO=http,https`,
//! `BENCH_ONLY=state_10k` (alone: creates/s in memory and with `--state-dir` on a world of
//! 10,000 VMs, and their ratio against the 0.8 floor),
//! `BENCH_CLIENT_THREADS` (default 1).
//! Besides throughput and latency it prints the CPU time the server and the client spent per
//! request, which stays meaningful when other work shares the machine.
//!
//! The reference: the same client against a bare axum handler that answers every
//! `…/status/current` with one fixed body of the fake's size, served the same way (axum-server,
//! the same TLS configuration and acceptor, a process of its own: this bench binary run again
//! with `BENCH_BARE_SERVE`). `…_vs_bare` is the fake's throughput over the bare handler's, in
//! turns of the same length in the same run: what a request costs beyond routing and rendering.
//! `…_vs_bare_cpu` is the same comparison by the servers' CPU time per request (bare over
//! fake, medians of the turns), which other work on the machine disturbs less.

use std::io::{BufRead, BufReader as StdBufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[path = "common/site.rs"]
mod site;
use site::{FIRST_VMID, TOKEN, VMS, node_of, scenario_yaml};

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

#[derive(Clone)]
struct Target {
    addr: std::net::SocketAddr,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

/// A minimal HTTP/1.1 keep-alive client: the server, not the client, should be what we measure.
struct Conn {
    io: BufReader<Box<dyn Io>>,
    line: String,
}

impl Conn {
    async fn open(t: &Target) -> Result<Conn> {
        let tcp = TcpStream::connect(t.addr).await?;
        tcp.set_nodelay(true)?;
        let io: Box<dyn Io> = match &t.tls {
            None => Box::new(tcp),
            Some((cfg, name)) => {
                let c = tokio_rustls::TlsConnector::from(cfg.clone());
                Box::new(c.connect(name.clone(), tcp).await?)
            }
        };
        Ok(Conn {
            io: BufReader::new(io),
            line: String::new(),
        })
    }

    async fn request(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Result<(u16, Vec<u8>)> {
        self.send(method, &format!("/api2/json{path}"), form).await
    }

    /// A request to `path` as given (the control plane's `/_fake/…` routes).
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Result<(u16, Vec<u8>)> {
        let mut req =
            format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {TOKEN}\r\n");
        if let Some(body) = form {
            req.push_str(&format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ));
        } else {
            req.push_str("\r\n");
        }
        self.io.get_mut().write_all(req.as_bytes()).await?;
        self.io.get_mut().flush().await?;

        self.line.clear();
        self.io.read_line(&mut self.line).await?;
        let status: u16 = self
            .line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("bad status line {:?}", self.line))?;
        let mut len = 0usize;
        let mut chunked = false;
        loop {
            self.line.clear();
            if self.io.read_line(&mut self.line).await? == 0 {
                bail!("connection closed in headers");
            }
            let l = self.line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse()?;
                } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                self.line.clear();
                self.io.read_line(&mut self.line).await?;
                let n = usize::from_str_radix(self.line.trim(), 16)?;
                let mut chunk = vec![0; n + 2];
                self.io.read_exact(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            body.resize(len, 0);
            self.io.read_exact(&mut body).await?;
        }
        Ok((status, body))
    }
}

fn upid_of(body: &[u8]) -> Result<String> {
    let v: serde_json::Value = serde_json::from_slice(body)?;
    v["data"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no UPID in {v}"))
}

/// Creates one VM and polls its task until it stopped; returns the number of polls.
async fn create_and_wait(c: &mut Conn, vmid: u32) -> Result<u32> {
    let node = node_of(vmid);
    let form = format!(
        "vmid={vmid}&name=vm{vmid}&memory=512&cores=1&scsi0=local-lvm%3A1&net0=virtio%2Cbridge%3Dvmbr0"
    );
    let (status, body) = c
        .request("POST", &format!("/nodes/{node}/qemu"), Some(&form))
        .await?;
    if status != 200 {
        bail!("create {vmid}: {status} {}", String::from_utf8_lossy(&body));
    }
    let upid = upid_of(&body)?;
    let enc: String =
        percent_encoding::utf8_percent_encode(&upid, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    let mut polls = 0;
    loop {
        polls += 1;
        let (status, body) = c
            .request("GET", &format!("/nodes/{node}/tasks/{enc}/status"), None)
            .await?;
        if status != 200 {
            bail!("task status {upid}: {status}");
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        if v["data"]["status"] == "stopped" {
            if v["data"]["exitstatus"] != "OK" {
                bail!("create {vmid} failed: {}", v["data"]["exitstatus"]);
            }
            return Ok(polls);
        }
        if polls > 100_000 {
            bail!("task {upid} never stopped");
        }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Resources,
    StatusCurrent,
    CreatePoll,
}

struct Outcome {
    ops: usize,
    requests: usize,
    elapsed: Duration,
    lat_us: Vec<u64>,
    errors: usize,
    /// CPU seconds the server and this client used during the measurement.
    server_cpu: f64,
    client_cpu: f64,
}

async fn run(
    t: &Target,
    server_pid: u32,
    op: Op,
    clients: usize,
    dur: Duration,
    next_vmid: Arc<AtomicU32>,
) -> Result<Outcome> {
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(Conn::open(t).await?);
    }
    let server_pid = server_pid.to_string();
    let (server0, client0) = (cpu_secs(&server_pid), cpu_secs("self"));
    let start = Instant::now();
    let deadline = start + dur;
    let mut tasks = Vec::new();
    for (i, mut c) in conns.into_iter().enumerate() {
        let next_vmid = next_vmid.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let (mut ops, mut requests, mut errors) = (0usize, 0usize, 0usize);
            let mut k = i as u32;
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let r = match op {
                    Op::Resources => c
                        .request("GET", "/cluster/resources", None)
                        .await
                        .map(|(s, _)| (s == 200, 1)),
                    Op::StatusCurrent => {
                        k = k.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        let vmid = FIRST_VMID + k % VMS;
                        let path = format!("/nodes/{}/qemu/{vmid}/status/current", node_of(vmid));
                        c.request("GET", &path, None)
                            .await
                            .map(|(s, _)| (s == 200, 1))
                    }
                    Op::CreatePoll => {
                        let vmid = next_vmid.fetch_add(1, Ordering::Relaxed);
                        create_and_wait(&mut c, vmid)
                            .await
                            .map(|polls| (true, 1 + polls as usize))
                    }
                };
                match r {
                    Ok((ok, n)) => {
                        lat.push(t0.elapsed().as_micros() as u64);
                        ops += 1;
                        requests += n;
                        if !ok {
                            errors += 1;
                        }
                    }
                    Err(e) => {
                        eprintln!("request failed: {e:#}");
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, ops, requests, errors)
        }));
    }
    let mut out = Outcome {
        ops: 0,
        requests: 0,
        elapsed: Duration::ZERO,
        lat_us: Vec::new(),
        errors: 0,
        server_cpu: 0.0,
        client_cpu: 0.0,
    };
    for t in tasks {
        let (lat, ops, requests, errors) = t.await?;
        out.lat_us.extend(lat);
        out.ops += ops;
        out.requests += requests;
        out.errors += errors;
    }
    out.elapsed = start.elapsed();
    out.server_cpu = cpu_secs(&server_pid) - server0;
    out.client_cpu = cpu_secs("self") - client0;
    out.lat_us.sort_unstable();
    Ok(out)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// CPU time (user + system) a process has used so far, from `/proc/PID/stat`.
fn cpu_secs(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are fields 14 and 15, i.e. indexes 11 and 12 after the comm.
    (ticks(11) + ticks(12)) / 100.0
}

fn report(name: &str, o: &Outcome, unit: &str) {
    let secs = o.elapsed.as_secs_f64();
    println!("{name}_throughput: {:.0} {unit}", o.ops as f64 / secs);
    if !matches!(unit, "req/s") {
        println!("{name}_requests: {:.0} req/s", o.requests as f64 / secs);
    }
    println!("{name}_p50: {:.3} ms", pct(&o.lat_us, 0.50));
    println!("{name}_p90: {:.3} ms", pct(&o.lat_us, 0.90));
    println!("{name}_p99: {:.3} ms", pct(&o.lat_us, 0.99));
    println!("{name}_p999: {:.3} ms", pct(&o.lat_us, 0.999));
    println!("{name}_errors: {} count", o.errors);
    if o.requests > 0 {
        let per = |cpu: f64| cpu * 1e6 / o.requests as f64;
        println!("{name}_server_cpu: {:.1} us/req", per(o.server_cpu));
        println!("{name}_client_cpu: {:.1} us/req", per(o.client_cpu));
    }
}

struct Server {
    child: Child,
    target: Target,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(dir: &Path, scenario: &Path, tls: bool) -> Result<Server> {
    let state = dir.join(if tls { "state-https" } else { "state-http" });
    // `--state-dir` keeps the world on disk (a write per change); BENCH_STATE=off measures
    // without it, over HTTP only (the HTTPS client trusts the state dir's certificate).
    let state_off = std::env::var("BENCH_STATE").is_ok_and(|v| v == "off");
    start_server_in(
        scenario,
        tls,
        (tls || !state_off).then_some(state.as_path()),
    )
}

/// The server on `scenario`, keeping its world in `state` if given.
fn start_server_in(scenario: &Path, tls: bool, state: Option<&Path>) -> Result<Server> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-proxmox"));
    cmd.args([
        "serve",
        "--no-auth-delay",
        "--clock",
        "scaled:1000",
        "--scenario",
    ])
    .arg(scenario)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if let Some(state) = state {
        cmd.arg("--state-dir").arg(state);
    }
    if !tls {
        cmd.arg("--plain-http");
    }
    let mut child = cmd.spawn().context("starting fake-proxmox serve")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut line = String::new();
    StdBufReader::new(stdout).read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("url="))
        .ok_or_else(|| anyhow!("no ready line from the server: {line:?}"))?;
    let addr = url
        .split("://")
        .nth(1)
        .ok_or_else(|| anyhow!("bad url {url}"))?
        .parse()?;
    let tls_cfg = match (tls, state) {
        (true, Some(state)) => Some(client_tls(&state.join("cert.pem"))?),
        (true, None) => bail!("HTTPS needs a state dir (the client trusts its certificate)"),
        (false, _) => None,
    };
    Ok(Server {
        child,
        target: Target { addr, tls: tls_cfg },
    })
}

/// A TLS client that trusts only the server certificate at `cert`, for `localhost`.
fn client_tls(cert: &Path) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>)> {
    let cert = CertificateDer::from_pem_file(cert)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert)?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((Arc::new(cfg), ServerName::try_from("localhost")?.to_owned()))
}

fn peak_rss_mb(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmHWM in /proc/{pid}/status"))?;
    Ok(kb / 1024.0)
}

/// Create VMs `next`.. up to `end` through the API from 64 clients.
async fn load_vms(t: &Target, next: &Arc<AtomicU32>, end: u32) -> Result<()> {
    let mut loaders = Vec::new();
    for _ in 0..64 {
        let t = t.clone();
        let next = next.clone();
        loaders.push(tokio::spawn(async move {
            let mut c = Conn::open(&t).await?;
            loop {
                let vmid = next.fetch_add(1, Ordering::Relaxed);
                if vmid >= end {
                    return anyhow::Ok(());
                }
                create_and_wait(&mut c, vmid).await?;
            }
        }));
    }
    for l in loaders {
        l.await??;
    }
    next.store(end, Ordering::Relaxed);
    Ok(())
}

/// Creates per second in memory and with `--state-dir`, both on a world that holds 10,000
/// VMs already (over HTTP): the state dir's world is the in-memory one's, exported before
/// its creates were measured and laid down as the state file, so both start alike.
async fn bench_state_10k(dir: &Path, scenario: &Path, secs: Duration) -> Result<()> {
    const WORLD: u32 = 10_000;
    let next = Arc::new(AtomicU32::new(FIRST_VMID));
    let mem = start_server_in(scenario, false, None)?;
    let t0 = Instant::now();
    load_vms(&mem.target, &next, FIRST_VMID + WORLD).await?;
    println!("state_10k_load: {:.2} s", t0.elapsed().as_secs_f64());
    let mut c = Conn::open(&mem.target).await?;
    let (status, world) = c.send("GET", "/_fake/state/export", None).await?;
    if status != 200 {
        bail!("export: {status}");
    }
    let state = dir.join("state-10k");
    std::fs::create_dir_all(&state)?;
    std::fs::write(state.join("state.json"), &world)?;
    let mut mem_rate = Vec::new();
    for clients in [1usize, 64] {
        let o = run(
            &mem.target,
            mem.child.id(),
            Op::CreatePoll,
            clients,
            secs,
            next.clone(),
        )
        .await?;
        report(
            &format!("state_10k_memory_create_poll_c{clients}"),
            &o,
            "creates/s",
        );
        mem_rate.push(o.ops as f64 / o.elapsed.as_secs_f64());
    }
    drop(mem);
    let on_disk = start_server_in(scenario, false, Some(&state))?;
    // The same VMIDs as in memory: the state dir's world is the one before those creates.
    next.store(FIRST_VMID + WORLD, Ordering::Relaxed);
    for (i, clients) in [1usize, 64].into_iter().enumerate() {
        let o = run(
            &on_disk.target,
            on_disk.child.id(),
            Op::CreatePoll,
            clients,
            secs,
            next.clone(),
        )
        .await?;
        report(
            &format!("state_10k_state_dir_create_poll_c{clients}"),
            &o,
            "creates/s",
        );
        let rate = o.ops as f64 / o.elapsed.as_secs_f64();
        println!(
            "state_10k_ratio_c{clients}: {:.2} x (floor 0.80)",
            rate / mem_rate[i]
        );
    }
    Ok(())
}

async fn bench_one(dir: &Path, scenario: &Path, tls: bool, secs: Duration) -> Result<()> {
    let proto = if tls { "https" } else { "http" };
    let server = start_server(dir, scenario, tls)?;
    let t = server.target.clone();

    // Load 1,000 VMs over 50 nodes through the API (64 clients).
    let next = Arc::new(AtomicU32::new(FIRST_VMID));
    let load_start = Instant::now();
    load_vms(&t, &next, FIRST_VMID + VMS).await?;
    println!(
        "{proto}_load_1000_vms: {:.2} s",
        load_start.elapsed().as_secs_f64()
    );
    next.store(FIRST_VMID + VMS, Ordering::Relaxed);

    let pid = server.child.id();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let selected = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
    for clients in [1usize, 64] {
        if selected("cluster_resources") {
            let o = run(&t, pid, Op::Resources, clients, secs, next.clone()).await?;
            report(
                &format!("{proto}_cluster_resources_c{clients}"),
                &o,
                "req/s",
            );
        }
        if selected("status_current") {
            let o = run(&t, pid, Op::StatusCurrent, clients, secs, next.clone()).await?;
            report(&format!("{proto}_status_current_c{clients}"), &o, "req/s");
        }
    }
    if selected("status_current") && !std::env::var("BENCH_BARE").is_ok_and(|v| v == "off") {
        bare_reference(&t, pid, proto, tls, secs).await?;
    }
    println!("{proto}_peak_rss_1000_vms: {:.1} MB", peak_rss_mb(pid)?);
    // Creates last: they add VMs, and the GETs above are measured at exactly 1,000 VMs.
    if selected("create_poll") {
        for clients in [1usize, 64] {
            let o = run(&t, pid, Op::CreatePoll, clients, secs, next.clone()).await?;
            report(&format!("{proto}_create_poll_c{clients}"), &o, "creates/s");
        }
        println!(
            "{proto}_peak_rss_end: {:.1} MB ({} VMs)",
            peak_rss_mb(pid)?,
            next.load(Ordering::Relaxed) - FIRST_VMID
        );
    }
    Ok(())
}

/// The fake's `status/current` against a bare axum handler answering a body of the same size,
/// turn by turn (fake, bare, fake, bare, fake, bare): the ratio of the medians.
async fn bare_reference(
    fake: &Target,
    fake_pid: u32,
    proto: &str,
    tls: bool,
    secs: Duration,
) -> Result<()> {
    let mut probe = Conn::open(fake).await?;
    let path = format!(
        "/nodes/{}/qemu/{FIRST_VMID}/status/current",
        node_of(FIRST_VMID)
    );
    let (status, body) = probe.request("GET", &path, None).await?;
    if status != 200 {
        bail!("status/current answered {status}");
    }
    let dir = tempfile::tempdir()?;
    let body_file = dir.path().join("body.json");
    std::fs::write(&body_file, &body)?;
    let bare = start_bare(dir.path(), &body_file, tls)?;
    let bare_pid = bare.child.id();
    let next = Arc::new(AtomicU32::new(0));
    for clients in [1usize, 64] {
        let (mut f, mut b) = (Vec::new(), Vec::new());
        // Server CPU per request of each turn: steadier than throughput on a shared machine.
        let (mut fc, mut bc) = (Vec::new(), Vec::new());
        let per_req = |o: &Outcome| o.server_cpu * 1e6 / o.requests.max(1) as f64;
        for _ in 0..3 {
            let o = run(
                fake,
                fake_pid,
                Op::StatusCurrent,
                clients,
                secs,
                next.clone(),
            )
            .await?;
            f.push(o.ops as f64 / o.elapsed.as_secs_f64());
            fc.push(per_req(&o));
            let o = run(
                &bare.target,
                bare_pid,
                Op::StatusCurrent,
                clients,
                secs,
                next.clone(),
            )
            .await?;
            b.push(o.ops as f64 / o.elapsed.as_secs_f64());
            bc.push(per_req(&o));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (fm, bm) = (median(&mut f), median(&mut b));
        println!(
            "{proto}_bare_status_current_c{clients}_throughput: {bm:.0} req/s ({} B body)",
            body.len()
        );
        println!("{proto}_status_current_c{clients}_turns: {fm:.0} req/s (median of 3)");
        println!("{proto}_status_current_c{clients}_vs_bare: {:.2}", fm / bm);
        let (fcm, bcm) = (median(&mut fc), median(&mut bc));
        println!(
            "{proto}_bare_status_current_c{clients}_server_cpu: {bcm:.1} us/req (median of 3)"
        );
        println!(
            "{proto}_status_current_c{clients}_turns_server_cpu: {fcm:.1} us/req (median of 3)"
        );
        println!(
            "{proto}_status_current_c{clients}_vs_bare_cpu: {:.2}",
            bcm / fcm
        );
    }
    Ok(())
}

/// This bench binary as the bare server (`BENCH_BARE_SERVE=http|https`, the body's file in
/// `BENCH_BARE_BODY`, the certificate written to `BENCH_BARE_DIR`).
fn start_bare(dir: &Path, body: &Path, tls: bool) -> Result<Server> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .env("BENCH_BARE_SERVE", if tls { "https" } else { "http" })
        .env("BENCH_BARE_BODY", body)
        .env("BENCH_BARE_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting the bare server")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut line = String::new();
    StdBufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("bare addr=")
        .ok_or_else(|| anyhow!("no ready line from the bare server: {line:?}"))?
        .parse()?;
    let tls_cfg = if tls {
        Some(client_tls(&dir.join("cert.pem"))?)
    } else {
        None
    };
    Ok(Server {
        child,
        target: Target { addr, tls: tls_cfg },
    })
}

/// The bare server: one axum route answering the fixed body, served as the fake serves
/// (axum-server, the fake's TLS server configuration, the no-delay acceptor, a multi-thread
/// runtime with the default worker count).
fn serve_bare(mode: &str) -> Result<()> {
    use axum::routing::get;
    let body: bytes::Bytes = std::fs::read(std::env::var("BENCH_BARE_BODY")?)?.into();
    let dir = std::path::PathBuf::from(std::env::var("BENCH_BARE_DIR")?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let app = axum::Router::new().route(
            "/api2/json/nodes/{node}/qemu/{vmid}/status/current",
            get(move || {
                let body = body.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/json;charset=UTF-8",
                        )],
                        body,
                    )
                }
            }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let acceptor = axum_server::accept::NoDelayAcceptor::new();
        let svc = app.into_make_service();
        if mode == "https" {
            let cert = fake_proxmox::server::tls::make_cert(&[])?;
            std::fs::write(dir.join("cert.pem"), &cert.cert_pem)?;
            let cfg = fake_proxmox::server::tls::server_config(&cert)?;
            let cfg = axum_server::tls_rustls::RustlsConfig::from_config(cfg);
            println!("bare addr={addr}");
            axum_server::from_tcp_rustls(listener, cfg)?
                .map(|tls| tls.acceptor(acceptor))
                .serve(svc)
                .await?;
        } else {
            println!("bare addr={addr}");
            axum_server::from_tcp(listener)?
                .acceptor(acceptor)
                .serve(svc)
                .await?;
        }
        anyhow::Ok(())
    })
}

fn main() -> Result<()> {
    if let Ok(mode) = std::env::var("BENCH_BARE_SERVE") {
        return serve_bare(&mode);
    }
    let secs = Duration::from_secs_f64(
        std::env::var("BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3.0),
    );
    let dir = tempfile::tempdir()?;
    let scenario = dir.path().join("bench.yaml");
    std::fs::write(&scenario, scenario_yaml())?;
    // Client threads: BENCH_CLIENT_THREADS (default 1, so the cores are left to the server).
    let threads: usize = std::env::var("BENCH_CLIENT_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    // Opt-in (it loads 10,000 VMs twice): BENCH_ONLY=state_10k.
    if std::env::var("BENCH_ONLY").is_ok_and(|o| o.split(',').any(|o| o == "state_10k")) {
        return rt.block_on(bench_state_10k(dir.path(), &scenario, secs));
    }
    let protos = std::env::var("BENCH_PROTO").unwrap_or_default();
    for tls in [false, true] {
        let name = if tls { "https" } else { "http" };
        if protos.is_empty() || protos.split(',').any(|p| p == name) {
            rt.block_on(bench_one(dir.path(), &scenario, tls, secs))?;
        }
    }
    Ok(())
}
