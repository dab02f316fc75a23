//! `--emit html`: one self-contained page drawing the compiled graph,
//! checked as a browser-independent reader can: it parses as XML, draws
//! one box per kernel that `ircc stats` counts and one mark per eliminated
//! layout op, keeps every box inside the picture and apart from the
//! others, fetches nothing, and is the same page every time.

mod common;

use common::{ircc, root};

const SWIN: &str = "tests/models/swin_t_w24_dynamo.onnx";

fn page(model: &str) -> String {
    let model = root().join(model);
    let out = ircc(&[
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "--emit",
        "html",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
}

/// The kernels `ircc stats` counts in `model` under smartmem.
fn kernels_counted(model: &str) -> u64 {
    let model = root().join(model);
    let stats = ircc(&[
        "stats",
        model.to_str().unwrap(),
        "--pipeline",
        "smartmem",
        "--json",
    ]);
    let stats: serde_json::Value = serde_json::from_str(&stats.stdout).unwrap();
    stats["kernels"].as_u64().unwrap()
}

fn number(node: roxmltree::Node, attr: &str) -> f64 {
    node.attribute(attr).unwrap().parse().unwrap()
}

#[test]
fn the_page_draws_every_kernel_and_eliminated_layout_op_of_swin() {
    let html = page(SWIN);
    let doc = roxmltree::Document::parse(html.trim_start_matches("<!DOCTYPE html>\n"))
        .expect("the page is well-formed XML");
    let boxes = |class: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("g") && n.attribute("class") == Some(class))
            .collect::<Vec<_>>()
    };
    assert_eq!(boxes("kernel").len() as u64, kernels_counted(SWIN));
    assert_eq!(boxes("input").len(), 1);
    assert_eq!(boxes("output").len(), 1);

    // Every index view of the compiled IR is drawn: a dashed box between
    // kernels, or a line marked ~ inside one.
    let model = root().join(SWIN);
    let ir = ircc(&[model.to_str().unwrap(), "--pipeline", "smartmem"]).stdout;
    let views_in_ir = ir.matches(" = index.").count();
    let marked = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("eliminated"))
        .count();
    assert!(views_in_ir > 100);
    assert_eq!(boxes("view").len() + marked, views_in_ir);

    // Boxes lie inside the picture and never on each other.
    let svg = doc.descendants().find(|n| n.has_tag_name("svg")).unwrap();
    let (width, height) = (number(svg, "width"), number(svg, "height"));
    let rects: Vec<[f64; 4]> = doc
        .descendants()
        .filter(|n| n.has_tag_name("rect"))
        .map(|r| {
            let [x, y] = [number(r, "x"), number(r, "y")];
            [x, y, x + number(r, "width"), y + number(r, "height")]
        })
        .collect();
    for (i, a) in rects.iter().enumerate() {
        assert!(
            a[0] >= 0.0 && a[1] >= 0.0 && a[2] <= width && a[3] <= height,
            "{a:?}"
        );
        for b in &rects[i + 1..] {
            let apart = a[2] <= b[0] || b[2] <= a[0] || a[3] <= b[1] || b[3] <= a[1];
            assert!(apart, "boxes {a:?} and {b:?} overlap");
        }
    }
    // Every edge joins two boxes' borders, and carries its tensor's type.
    let edges: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("edge"))
        .collect();
    assert!(edges.len() > rects.len() - 1);
    for e in &edges {
        let title = e.first_element_child().and_then(|t| t.text()).unwrap();
        assert!(
            title.starts_with("tensor<") || title.starts_with("!texture.tex2d<"),
            "{title}"
        );
    }

    // Self-contained: no script, and nothing referenced but the arrow.
    for n in doc.descendants().filter(|n| n.is_element()) {
        assert!(!n.has_tag_name("script") && !n.has_tag_name("link") && !n.has_tag_name("img"));
        for a in n.attributes() {
            if matches!(a.name(), "href" | "src") {
                panic!("the page refers to {}", a.value());
            }
            if a.value().contains("url(") {
                assert_eq!(a.value(), "url(#arrow)");
            }
        }
    }
}

#[test]
fn the_page_is_the_same_every_time() {
    assert!(page(SWIN) == page(SWIN));
}

/// Names with markup and control characters stay text: the page still
/// parses, and shows them.
#[test]
fn names_with_markup_stay_text() {
    let scratch = common::scratch_dir("html-names");
    let ir = scratch.join("h.ir");
    std::fs::write(
        &ir,
        "func.func @main(%x: tensor<4xf32> {ircc.name = \"a<&\\\"b\\01c>\"}) -> (tensor<4xf32> {ircc.name = \"out</svg>\"}) {\n  %y = graph.exp %x : tensor<4xf32> -> tensor<4xf32>\n  func.return %y : tensor<4xf32>\n}\n",
    )
    .unwrap();
    let out = ircc(&[ir.to_str().unwrap(), "--emit", "html"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let doc = roxmltree::Document::parse(out.stdout.trim_start_matches("<!DOCTYPE html>\n"))
        .expect("the page is well-formed XML");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    assert!(texts.contains(&"input a<&\"b\u{FFFD}c>"), "{texts:?}");
    assert!(texts.contains(&"return out</svg>"), "{texts:?}");
}

/// A real browser (headless Chromium, which `.ci/run` installs) opens the
/// page and finds every kernel's box in the SVG it parsed.
#[test]
fn a_headless_browser_opens_the_page() {
    let scratch = common::scratch_dir("html-browser");
    let file = scratch.join("swin.html");
    std::fs::write(&file, page(SWIN)).unwrap();
    let dom = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", file.display()))
        .output();
    let dom = match dom {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        other => {
            assert!(
                std::env::var_os("IRCC_REQUIRE_BROWSER").is_none(),
                "IRCC_REQUIRE_BROWSER is set but chromium does not run: {other:?}"
            );
            eprintln!("browser: 0 passed, 0 failed, 1 skipped (no chromium)");
            return;
        }
    };
    assert!(dom.contains("<svg"), "the browser did not parse the SVG");
    assert_eq!(
        dom.matches("<g class=\"kernel\">").count() as u64,
        kernels_counted(SWIN)
    );
}
