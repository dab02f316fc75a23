//! The browser runtime (`web/ircc.js`) in a real browser: headless
//! Chromium, whose WebGPU runs on SwiftShader's Vulkan here
//! ([`CHROMIUM_FLAGS`]), opens `web/run.html` from a server on the
//! loopback, which loads a bundle, runs it twice and posts back its outputs,
//! the GPU objects the runs created and any error.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use common::{find_model, ircc, root, scratch_dir};

/// WebGPU in headless Chromium without a GPU (Debian's chromium 156):
/// SwiftShader's Vulkan as the adapter. `--no-sandbox` because CI runs as
/// root.
const CHROMIUM_FLAGS: [&str; 6] = [
    "--headless=new",
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-webgpu-adapter=swiftshader",
];

/// How long a page may take to report: SwiftShader runs the reduced
/// models in seconds, so this only bounds a hang.
const REPORT_TIMEOUT: Duration = Duration::from_secs(300);

/// Serves `web/` at `/web/` and `bundles` at `/b/` on the loopback, and
/// sends the body of each POST to `/report` down the channel.
fn serve(bundles: PathBuf) -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (tx, bundles) = (tx.clone(), bundles.clone());
            std::thread::spawn(move || answer(stream, &bundles, &tx));
        }
    });
    (port, rx)
}

/// Answers one request: a file under `web/` or `bundles`, or a report.
fn answer(mut stream: TcpStream, bundles: &Path, reports: &mpsc::Sender<String>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut length = 0;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method == "POST" && path == "/report" {
        let mut body = vec![0; length];
        let _ = reader.read_exact(&mut body);
        let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        let _ = reports.send(String::from_utf8_lossy(&body).into_owned());
        return;
    }
    // Only plain names below the two folders: no `..`, no root.
    let under = |base: PathBuf, rest: &str| {
        let rest = Path::new(rest);
        rest.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
            .then(|| base.join(rest))
    };
    let file = match path.strip_prefix('/') {
        Some(p) if p.starts_with("web/") => under(root().join("web"), &p[4..]),
        Some(p) if p.starts_with("b/") => under(bundles.to_path_buf(), &p[2..]),
        _ => None,
    };
    let reply = match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
        Some((f, body)) => {
            let kind = match f.extension().and_then(|e| e.to_str()) {
                Some("js") => "text/javascript",
                Some("html") => "text/html; charset=utf-8",
                Some("json") => "application/json",
                _ => "application/octet-stream",
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            [head.into_bytes(), body].concat()
        }
        None => {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        }
    };
    let _ = stream.write_all(&reply);
}

/// What `web/run.html` reported, or `None` where this machine has no
/// browser with WebGPU (a failure when `IRCC_REQUIRE_BROWSER` is set).
/// Each run has a fresh profile in `scratch`.
fn browser_run(
    port: u16,
    reports: &mpsc::Receiver<String>,
    query: &str,
    scratch: &Path,
) -> Option<serde_json::Value> {
    let profile = tempfile::tempdir_in(scratch).unwrap();
    let url = format!("http://127.0.0.1:{port}/web/run.html?{query}&report=/report");
    let required = std::env::var_os("IRCC_REQUIRE_BROWSER").is_some();
    let child = std::process::Command::new("chromium")
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(&url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !required,
                "IRCC_REQUIRE_BROWSER is set but chromium does not start: {e}"
            );
            eprintln!("browser: 0 passed, 0 failed, 1 skipped (no chromium)");
            return None;
        }
    };
    // Wait for the report, or for the browser to end without one.
    let started = std::time::Instant::now();
    let report = loop {
        match reports.recv_timeout(Duration::from_secs(1)) {
            Ok(r) => break Ok(r),
            Err(_) if started.elapsed() > REPORT_TIMEOUT => break Err("timed out"),
            Err(_) if child.try_wait().ok().flatten().is_some() => break Err("chromium ended"),
            Err(_) => {}
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let report: serde_json::Value =
        serde_json::from_str(&report.unwrap_or_else(|e| panic!("no report from {url}: {e}")))
            .unwrap();
    let error = report["error"].as_str().unwrap_or("");
    if error.starts_with("WebGPU: no adapter") || error.starts_with("WebGPU: this browser has no") {
        assert!(!required, "IRCC_REQUIRE_BROWSER is set but {error}");
        eprintln!("browser: 0 passed, 0 failed, 1 skipped ({error})");
        return None;
    }
    Some(report)
}

/// `name`'s bundle (reduced, from tests/models) for `device` in
/// `dir/name`, and the outputs `ircc run` gives it on `name.input.npy`, in
/// `dir/name.out`.
fn bundle(dir: &Path, name: &str, device: &str) -> PathBuf {
    let model = find_model(name).unwrap();
    let out = dir.join(name);
    let compiled = ircc(&[
        "compile",
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "--device",
        device,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(compiled.code, 0, "{}", compiled.stderr);
    let input = root().join(format!("tests/models/{name}.input.npy"));
    let ran = ircc(&[
        "run",
        out.to_str().unwrap(),
        "--input",
        &format!("input={}", input.display()),
        "--output-dir",
        dir.join(format!("{name}.out")).to_str().unwrap(),
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    std::fs::copy(&input, out.join("input.npy")).unwrap();
    out
}

/// The reduced Swin-T (compiled for any WebGPU device) and BERT (for the
/// default device) run in the browser as `ircc run` runs them, in the
/// chunks `ircc run` submits, a second run creates no GPU object, and each
/// kernel is timed.
#[test]
fn reduced_models_run_in_the_browser_as_ircc_runs_them() {
    let scratch = scratch_dir("web-models");
    let (port, reports) = serve(scratch.to_path_buf());
    for (name, device) in [("swin_t_w24", "webgpu"), ("bert_l2_w64", "adreno740")] {
        let dir = bundle(&scratch, name, device);
        let plan: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
        if device == "webgpu" {
            // Within WebGPU's defaults, so any browser's adapter runs it.
            assert_eq!(
                plan["webgpu"],
                serde_json::json!({"features": [], "limits": {}}),
                "{name}"
            );
        }
        let query = format!("bundle=/b/{name}/&input=input=/b/{name}/input.npy&profile");
        let Some(report) = browser_run(port, &reports, &query, &scratch) else {
            return;
        };
        assert!(report["error"].is_null(), "{name}: {}", report["error"]);
        assert_eq!(
            report["created_by_runs"], 0,
            "{name}: a run created GPU objects"
        );
        assert_eq!(report["runs_agree"], true, "{name}: two runs differ");
        let count = plan["dispatches"].as_array().unwrap().len();
        let ends: Vec<usize> = ircc_plan::submission_ends(count).collect();
        assert!(ends.len() > 2, "{name}: {count} dispatches in {ends:?}");
        assert_eq!(report["chunk_ends"], serde_json::json!(ends), "{name}");
        let kernels = report["kernels"].as_array().expect("the kernels' times");
        assert_eq!(kernels.len(), plan["dispatches"].as_array().unwrap().len());
        for (k, d) in kernels.iter().zip(plan["dispatches"].as_array().unwrap()) {
            assert_eq!(k["kernel"], d["kernel"], "{name}");
            let us = k["us"].as_f64().unwrap_or(f64::NAN);
            assert!(us.is_finite() && us >= 0.0, "{name}: {k}");
        }
        let total: f64 = kernels.iter().filter_map(|k| k["us"].as_f64()).sum();
        assert!(total > 0.0, "{name}: no kernel took any time");
        eprintln!(
            "{name} ({device}): {} kernels, {:.0} us in all (Model.profile)",
            kernels.len(),
            total
        );
        let outputs = common::files_under(&scratch.join(format!("{name}.out")));
        let [output] = &outputs[..] else {
            panic!("{name}: ircc run wrote {outputs:?}");
        };
        let want = ircc_reference::read_npy(&scratch.join(format!("{name}.out")).join(output))
            .unwrap()
            .to_f64();
        let got: Vec<f64> = report["outputs"]
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(|v| v.as_array())
            .expect("one output")
            .iter()
            .map(|x| x.as_f64().unwrap_or(f64::NAN))
            .collect();
        let want: Vec<f64> = want.iter().copied().collect();
        assert_eq!(got.len(), want.len(), "{name}");
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let diff = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs() / scale)
            // A NaN (JSON's null) is as far off as an output can be.
            .fold(
                0.0,
                |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) },
            );
        assert!(
            diff <= 1e-4,
            "{name}: the browser's outputs differ by {diff:e}"
        );
    }
}

/// Damaged bundles are refused with a message naming the file and field,
/// before anything runs.
#[test]
fn damaged_bundles_are_refused_with_a_message() {
    let scratch = scratch_dir("web-damaged");
    let (port, reports) = serve(scratch.to_path_buf());
    let good = bundle(&scratch, "swin_t_w24", "adreno740");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(good.join("plan.json")).unwrap()).unwrap();
    type Damage = fn(&Path, &mut serde_json::Value);
    let cases: [(&str, Damage, &str); 5] = [
        (
            "version",
            |_, p| p["version"] = 2.into(),
            "plan.json: version: version 2 of the plan format",
        ),
        (
            "lying-size",
            |_, p| p["buffers"][1]["bytes"] = 4.into(),
            "plan.json: buffers[1].bytes: 4, where its shape and dtype take",
        ),
        (
            "lying-needs",
            |_, p| p["webgpu"]["limits"]["maxBufferSize"] = 1.into(),
            "plan.json: webgpu: says the plan needs {\"features\":[],\"limits\":{\"maxBufferSize\":1}}; its dispatches and shaders need {\"features\":[],\"limits\":{}}",
        ),
        (
            "missing-weights",
            |dir, _| std::fs::remove_file(dir.join("weights.safetensors")).unwrap(),
            "weights.safetensors: cannot be fetched: HTTP 404",
        ),
        (
            "short-weights",
            |dir, _| {
                std::fs::write(
                    dir.join("weights.safetensors"),
                    [8u8, 0, 0, 0, 0, 0, 0, 0, b'{'],
                )
                .unwrap()
            },
            "weights.safetensors: a header of 8 bytes in a file of 9",
        ),
    ];
    for (name, damage, message) in cases {
        let dir = scratch.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&good).unwrap().flatten() {
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        let mut damaged = plan.clone();
        damage(&dir, &mut damaged);
        std::fs::write(dir.join("plan.json"), damaged.to_string()).unwrap();
        let query = format!("bundle=/b/{name}/&input=input=/b/{name}/input.npy");
        let Some(report) = browser_run(port, &reports, &query, &scratch) else {
            return;
        };
        let error = report["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: ran: {report}"));
        assert!(error.starts_with(message), "{name}: {error}");
    }
}
