//! The SVG writer ([`figures::diagram`]) and the bar chart: deterministic output, escaping,
//! the document's frame (size, viewBox, background, title), and errors (never panics) for bad
//! numbers and paths.

use figures::diagram::{Anchor, Color, Diagram, Grid, Style, TextStyle, polar, text_width};
use figures::{BarChart, FigureError};

/// A diagram that uses every kind of element.
fn everything() -> Diagram {
    let mut d = Diagram::new(420, 260, "Every element");
    d.describe("A grid, boxes, text, lines, arrows, arcs and a group.");
    let grid = Grid::new((20.0, 40.0), (3, 4), (22.0, 22.0))
        .fill_with(|r, c| (r != c).then_some(Color::okabe_ito(c).tint(0.6)))
        .text_with(|r, c| (r == c).then(|| format!("x_{{{r}}}")));
    d.grid(&grid)
        .rect(
            150.0,
            40.0,
            60.0,
            40.0,
            &Style::fill(Color::BLUE.tint(0.7))
                .and_stroke(Color::BLUE, 1.5)
                .rounded(4.0),
        )
        .text(
            180.0,
            60.0,
            "Q·K^{T} / √d_{k}",
            &TextStyle::new(15.0).bold().centered().middle(),
        )
        .text(
            400.0,
            20.0,
            "right",
            &TextStyle::new(13.0)
                .italic()
                .color(Color::MUTED)
                .anchor(Anchor::End),
        )
        .line(
            (20.0, 120.0),
            (200.0, 120.0),
            &Style::stroke(Color::GREY, 1.0).dashed(),
        )
        .polyline(
            &[(20.0, 140.0), (60.0, 160.0), (100.0, 140.0)],
            &Style::stroke(Color::INK, 2.0),
        )
        .polygon(
            &[(220.0, 140.0), (260.0, 140.0), (240.0, 170.0)],
            &Style::fill(Color::YELLOW),
        )
        .circle((300.0, 150.0), 5.0, &Style::fill(Color::INK))
        .arrow(
            (20.0, 200.0),
            (150.0, 200.0),
            &Style::stroke(Color::INK, 1.5),
        )
        .arc(
            (330.0, 200.0),
            40.0,
            -30.0,
            200.0,
            &Style::stroke(Color::VERMILLION, 1.5),
        )
        .arc_arrow(
            (330.0, 200.0),
            25.0,
            90.0,
            0.0,
            &Style::stroke(Color::BLUE, 1.5),
        )
        .group((250.0, 30.0), |g| {
            g.rect(0.0, 0.0, 30.0, 30.0, &Style::fill(Color::BLUISH_GREEN));
        });
    d
}

/// The value of attribute `name` on the first element that has it.
fn attribute<'a>(svg: &'a str, name: &str) -> &'a str {
    let start = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    let len = svg[start..].find('"').unwrap();
    &svg[start..start + len]
}

#[test]
fn the_same_calls_give_the_same_bytes() {
    let first = everything().to_svg().unwrap();
    assert_eq!(first, everything().to_svg().unwrap());
    // Saving writes exactly that text.
    let dir = tempfile::tempdir().unwrap();
    let path = everything().save(dir.path().join("d.svg")).unwrap();
    assert_eq!(std::fs::read_to_string(path).unwrap(), first);
}

#[test]
fn numbers_are_written_with_at_most_two_decimals() {
    let svg = everything().to_svg().unwrap();
    for token in svg.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')) {
        if let Some((_, decimals)) = token.split_once('.') {
            assert!(decimals.len() <= 2, "{token:?} in\n{svg}");
        }
    }
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
}

#[test]
fn the_view_box_matches_the_size_and_a_card_covers_it() {
    let svg = Diagram::new(640, 360, "size").to_svg().unwrap();
    assert_eq!(attribute(&svg, "width"), "640");
    assert_eq!(attribute(&svg, "height"), "360");
    assert_eq!(attribute(&svg, "viewBox"), "0 0 640 360");
    // The first shape is an opaque white card over the whole canvas, so the diagram reads the
    // same on a dark page.
    let card = &svg[svg.find("<rect").unwrap()..];
    let card = &card[..card.find("/>").unwrap()];
    assert!(
        card.contains("x=\"0\" y=\"0\" width=\"640\" height=\"360\"")
            && card.contains("fill=\"#ffffff\""),
        "{card}"
    );
}

#[test]
fn every_diagram_is_an_accessible_image() {
    let svg = everything().to_svg().unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(attribute(&svg, "role"), "img");
    assert_eq!(attribute(&svg, "aria-labelledby"), "title desc");
    assert!(svg.contains("<title id=\"title\">Every element</title>"));
    assert!(svg.contains(
        "<desc id=\"desc\">A grid, boxes, text, lines, arrows, arcs and a group.</desc>"
    ));
    assert!(attribute(&svg, "font-family").starts_with("DejaVu Sans"));
    // Nothing to fetch: no links, images, style sheets or scripts.
    for banned in ["href", "<image", "<style", "<script", "url(", "@import"] {
        assert!(!svg.contains(banned), "{banned} in\n{svg}");
    }
    // Without a description, only the title labels it.
    let plain = Diagram::new(10, 10, "t").to_svg().unwrap();
    assert_eq!(attribute(&plain, "aria-labelledby"), "title");
    assert!(!plain.contains("<desc"));
}

#[test]
fn text_is_escaped() {
    let mut d = Diagram::new(200, 100, "a < b & \"c\"");
    d.describe("x > y").text(
        10.0,
        20.0,
        "<script>&amp;</script> \"q\"",
        &TextStyle::new(14.0),
    );
    let svg = d.to_svg().unwrap();
    assert!(svg.contains("<title id=\"title\">a &lt; b &amp; &quot;c&quot;</title>"));
    assert!(svg.contains("<desc id=\"desc\">x &gt; y</desc>"));
    assert!(svg.contains(">&lt;script&gt;&amp;amp;&lt;/script&gt; &quot;q&quot;</text>"));
    assert!(!svg.contains("<script"));
    // Control characters, which XML forbids, are dropped.
    let mut d = Diagram::new(200, 100, "bell\u{7}");
    d.text(0.0, 10.0, "tab\there", &TextStyle::new(14.0));
    let svg = d.to_svg().unwrap();
    assert!(
        svg.contains(">bell</title>") && svg.contains(">tabhere</text>"),
        "{svg}"
    );
}

#[test]
fn scripts_are_small_but_legible_and_return_to_the_baseline() {
    let mut d = Diagram::new(300, 60, "scripts");
    d.text(
        10.0,
        30.0,
        "d_{k} and K^{T} and W_{Q}",
        &TextStyle::new(15.0),
    );
    let svg = d.to_svg().unwrap();
    // At 15 px, 0.8 of the size would be 12 px: scripts never go below 13.
    assert!(
        svg.contains(
            "d<tspan dy=\"3.75\" font-size=\"13\">k</tspan><tspan dy=\"-3.75\"> and K</tspan>"
        ),
        "{svg}"
    );
    assert!(
        svg.contains("<tspan dy=\"-6\" font-size=\"13\">T</tspan><tspan dy=\"6\"> and W</tspan>"),
        "{svg}"
    );
    assert!(svg.contains("xml:space=\"preserve\""));
    // Every shift down is undone before the next piece on the baseline.
    let shifts: f64 = svg
        .match_indices("dy=\"")
        .map(|(at, _)| {
            let rest = &svg[at + 4..];
            rest[..rest.find('"').unwrap()].parse::<f64>().unwrap()
        })
        .sum();
    assert!((shifts - 3.75).abs() < 1e-9, "{shifts}"); // ends inside the last subscript
}

#[test]
fn sizes_follow_the_embedded_font() {
    let style = TextStyle::new(16.0);
    let w = text_width("WWW", &style);
    assert!(w > 3.0 * 14.0 && w < 3.0 * 18.0, "{w}"); // DejaVu's W is about 0.99 em
    assert!(text_width("iii", &style) < w / 2.0);
    assert!(text_width("Q", &style.bold()) > text_width("Q", &style));
    assert_eq!(
        text_width("ab", &TextStyle::new(32.0)),
        2.0 * text_width("ab", &TextStyle::new(16.0))
    );
}

#[test]
fn grids_place_cells_and_report_their_edges() {
    let g = Grid::new((5.0, 7.0), (2, 3), (10.0, 20.0));
    assert_eq!(
        (g.left(), g.top(), g.right(), g.bottom()),
        (5.0, 7.0, 35.0, 47.0)
    );
    assert_eq!(g.cell(1, 2), (30.0, 37.0));
    let mut d = Diagram::new(50, 50, "grid");
    d.grid(
        &g.fill_with(|r, _| (r == 0).then_some(Color::ORANGE))
            .text_with(|_, c| (c == 1).then(|| "x".into())),
    );
    let svg = d.to_svg().unwrap();
    assert_eq!(svg.matches("fill=\"#e69f00\"").count(), 3); // the first row
    assert_eq!(svg.matches(">x</text>").count(), 2); // the middle column
}

#[test]
fn polar_angles_turn_counter_clockwise_on_the_screen() {
    let c = (0.0, 0.0);
    let close =
        |a: (f64, f64), b: (f64, f64)| (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12;
    assert!(close(polar(c, 1.0, 0.0), (1.0, 0.0)));
    assert!(close(polar(c, 1.0, 90.0), (0.0, -1.0))); // up: y decreases
    assert!(close(polar(c, 1.0, 180.0), (-1.0, 0.0)));
    assert!(close(polar(c, 2.0, -90.0), (0.0, 2.0)));
}

#[test]
fn bad_numbers_are_errors_not_panics() {
    const NAN: f64 = f64::NAN;
    type Draw = fn(&mut Diagram);
    let cases: [(&str, Draw); 11] = [
        ("rect", |d| {
            d.rect(NAN, 0.0, 1.0, 1.0, &Style::fill(Color::INK));
        }),
        ("negative rect", |d| {
            d.rect(0.0, 0.0, -1.0, 1.0, &Style::fill(Color::INK));
        }),
        ("text", |d| {
            d.text(f64::INFINITY, 0.0, "x", &TextStyle::new(14.0));
        }),
        ("text size", |d| {
            d.text(0.0, 0.0, "x", &TextStyle::new(0.0));
        }),
        ("line", |d| {
            d.line((0.0, 0.0), (NAN, 1.0), &Style::stroke(Color::INK, 1.0));
        }),
        ("arrow", |d| {
            d.arrow((0.0, 0.0), (1.0, 1.0), &Style::stroke(Color::INK, NAN));
        }),
        ("arc", |d| {
            d.arc((0.0, 0.0), 0.0, 0.0, 90.0, &Style::stroke(Color::INK, 1.0));
        }),
        ("arc arrow", |d| {
            d.arc_arrow((0.0, 0.0), 5.0, NAN, 90.0, &Style::stroke(Color::INK, 1.0));
        }),
        ("circle", |d| {
            d.circle((0.0, 0.0), -2.0, &Style::fill(Color::INK));
        }),
        ("grid", |d| {
            d.grid(&Grid::new((0.0, 0.0), (1, 1), (0.0, 5.0)));
        }),
        ("group", |d| {
            d.group((NAN, 0.0), |_| {});
        }),
    ];
    for (what, draw) in cases {
        let mut d = Diagram::new(100, 100, "bad");
        draw(&mut d);
        let err = d.to_svg().unwrap_err();
        assert!(matches!(err, FigureError::Nothing(_)), "{what}: {err}");
        assert!(
            err.to_string().starts_with("diagram \"bad\": "),
            "{what}: {err}"
        );
    }
    // The first problem is the one reported.
    let mut d = Diagram::new(100, 100, "two");
    d.rect(NAN, 0.0, 1.0, 1.0, &Style::fill(Color::INK)).circle(
        (0.0, 0.0),
        -1.0,
        &Style::fill(Color::INK),
    );
    assert!(d.to_svg().unwrap_err().to_string().contains("NaN"));
}

#[test]
fn canvases_and_titles_are_checked() {
    assert!(Diagram::new(0, 10, "zero").to_svg().is_err());
    assert!(Diagram::new(10, 100_000, "huge").to_svg().is_err());
    let err = Diagram::new(10, 10, "  ").to_svg().unwrap_err();
    assert!(err.to_string().contains("empty title"), "{err}");
}

#[test]
fn paths_must_end_in_svg() {
    let dir = tempfile::tempdir().unwrap();
    let d = Diagram::new(10, 10, "t");
    for bad in ["d.png", "d", "d.svg.txt"] {
        let err = d.save(dir.path().join(bad)).unwrap_err();
        assert!(
            matches!(err, FigureError::Extension { ext: "svg", .. }),
            "{bad}: {err}"
        );
        assert!(!dir.path().join(bad).exists());
    }
    assert!(d.save(dir.path().join("UPPER.SVG")).is_ok());
    let err = d.save(dir.path().join("missing/d.svg")).unwrap_err();
    assert!(matches!(err, FigureError::Write { .. }), "{err}");
}

#[test]
fn colors_tint_toward_white() {
    assert_eq!(Color::BLUE.tint(0.5), Color::rgb(128, 185, 217));
    assert_eq!(Color::BLUE.tint(-1.0), Color::BLUE);
    assert_eq!(Color::BLUE.tint(2.0), Color::WHITE);
    assert_eq!(Color::BLUE.tint(f64::NAN), Color::BLUE);
    assert_eq!(Color::INK.hex(), "#191919");
    let palette: Vec<Color> = (0..7).map(Color::okabe_ito).collect();
    for (i, a) in palette.iter().enumerate() {
        assert!(
            palette[i + 1..].iter().all(|b| b != a),
            "the palette repeats {a:?}"
        );
    }
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let be = |i: usize| u32::from_be_bytes(png[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn bar_charts_are_deterministic_and_grow_with_their_panels() {
    let chart = |panels: usize| {
        let mut c = BarChart::new()
            .title("bars")
            .labels(&["a", "b", "c"])
            .y_label("w")
            .x_label("key")
            .annotate(2);
        for p in 0..panels {
            c = c.panel(format!("panel {p}"), [0.2, 0.5 + p as f64 * 0.1, 0.3]);
        }
        c.to_png().unwrap()
    };
    assert_eq!(chart(2), chart(2));
    let (w1, h1) = png_size(&chart(1));
    let (w2, h2) = png_size(&chart(2));
    assert_eq!((w1, w2), (720, 720));
    assert!(h2 > h1 + 150, "{h1} {h2}");
    // Negative bars, automatic range, no labels.
    let signed = BarChart::new()
        .panel("scores", [1.5, -0.5, 0.25])
        .annotate(1)
        .to_png()
        .unwrap();
    assert_eq!(png_size(&signed).0, 720);
}

#[test]
fn bar_charts_check_their_input() {
    let err = BarChart::new().to_png().unwrap_err();
    assert!(err.to_string().contains("no panels"), "{err}");
    let err = BarChart::new()
        .labels(&["a", "b"])
        .panel("w", [0.5, 0.3, 0.2])
        .to_png()
        .unwrap_err();
    assert_eq!(err.to_string(), "panel \"w\" has 3 values for 2 bars");
    let err = BarChart::new()
        .panel("w", [0.5, 0.3])
        .panel("v", [1.0])
        .to_png()
        .unwrap_err();
    assert_eq!(err.to_string(), "panel \"v\" has 1 value for 2 bars");
    let err = BarChart::new()
        .panel("w", Vec::<f64>::new())
        .to_png()
        .unwrap_err();
    assert!(err.to_string().contains("no bars"), "{err}");
    let err = BarChart::new()
        .panel("w", [0.5, f64::NAN])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::BadPoint { .. }), "{err}");
    let err = BarChart::new()
        .y_range(1.0, 0.0)
        .panel("w", [0.5])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::BadRange { .. }), "{err}");
    let err = BarChart::new()
        .panel("w", [f64::MAX, -f64::MAX])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::TooWide { .. }), "{err}");
    let err = BarChart::new()
        .size(240, 80)
        .panel("w", vec![1.0; 200])
        .to_png()
        .unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let err = BarChart::new()
        .panel("w", [1.0])
        .save(dir.path().join("w.svg"))
        .unwrap_err();
    assert!(matches!(err, FigureError::NotPng { .. }), "{err}");
    // All zero: drawn, not divided by zero.
    assert!(BarChart::new().panel("w", [0.0, 0.0]).to_png().is_ok());
}
