//! Behaviour of the public API: determinism, sizes, masking, and an error (never a panic) for
//! every kind of bad input.

use figures::{Axis, ColorScheme, FigureError, Heatmap, HeatmapGrid, LineChart, Panel, ValueRange};
use ndarray::{Array2, array};

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let be = |i: usize| u32::from_be_bytes(png[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// The decoded RGB pixels of a PNG.
fn pixels(png: &[u8]) -> Vec<[u8; 3]> {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf[..info.buffer_size()]
        .chunks(3)
        .map(|c| [c[0], c[1], c[2]])
        .collect()
}

fn weights() -> Array2<f64> {
    array![[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]]
}

#[test]
fn the_same_input_gives_the_same_bytes() {
    let heatmap = || {
        Heatmap::new(&weights())
            .labels(&["The", "cat", "sat"])
            .title("w")
            .to_png()
            .unwrap()
    };
    assert_eq!(heatmap(), heatmap());
    let grid = || {
        HeatmapGrid::new()
            .panel(Panel::new(&weights()).title("a"))
            .panel(Panel::new(&weights().t()).title("b"))
            .to_png()
            .unwrap()
    };
    assert_eq!(grid(), grid());
    let chart = || {
        LineChart::new()
            .x_axis(Axis::Log2)
            .series("s", [(1.0, 1.0), (8.0, 3.0)])
            .to_png()
            .unwrap()
    };
    assert_eq!(chart(), chart());
}

#[test]
fn save_writes_what_to_png_returns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.png");
    let h = Heatmap::new(&weights());
    h.save(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), h.to_png().unwrap());
}

#[test]
fn f32_and_views_draw_like_f64() {
    let w64 = weights();
    let w32 = w64.mapv(|v| v as f32);
    let a = Heatmap::new(&w32).to_png().unwrap();
    let b = Heatmap::new(&w64.view()).to_png().unwrap();
    // f32 rounding can change the last decimal only beyond the precision shown.
    assert_eq!(png_size(&a), png_size(&b));
}

#[test]
fn figures_fit_the_book_column() {
    let (w, h) = png_size(
        &Heatmap::new(&weights())
            .labels(&["The", "cat", "sat"])
            .to_png()
            .unwrap(),
    );
    assert!(w <= 800 && h <= 600, "{w}×{h}");
    // Two panels go side by side.
    let pair = HeatmapGrid::new()
        .panel(Panel::new(&weights()))
        .panel(Panel::new(&weights()));
    let (w, h) = png_size(&pair.to_png().unwrap());
    assert!(w > h, "{w}×{h}");
    // A 64×64 matrix is drawn without values and stays a readable size.
    let big = Array2::from_shape_fn((64, 64), |(i, j)| ((i * 7 + j) % 11) as f64);
    let (w, h) = png_size(&Heatmap::new(&big).to_png().unwrap());
    assert!(w <= 800 && h <= 800, "{w}×{h}");
    let (w, _) = png_size(
        &LineChart::new()
            .series("s", [(0.0, 1.0), (1.0, 0.0)])
            .to_png()
            .unwrap(),
    );
    assert_eq!(w, 720);
}

#[test]
fn masked_cells_are_grey_and_unmasked_ones_are_not() {
    // Count the masked fill colour (text edges may hit it by chance, a masked cell is mostly it).
    let grey = |png: Vec<u8>| {
        pixels(&png)
            .iter()
            .filter(|&&p| p == [214, 214, 214])
            .count()
    };
    let m = array![[0.5, 0.5], [0.2, 0.8]];
    assert!(grey(Heatmap::new(&m).to_png().unwrap()) < 100);
    let masked = Heatmap::new(&m)
        .masked(&array![[false, true], [false, false]])
        .to_png()
        .unwrap();
    assert!(grey(masked.clone()) > 1000);
    let allowed = Heatmap::new(&m)
        .allowed(&array![[true, false], [true, true]])
        .to_png()
        .unwrap();
    assert_eq!(masked, allowed);
    // The legend's word is drawn (only) when a cell is masked: it changes the image then.
    let legend = |word: &str, mask| {
        Heatmap::new(&m).masked(&mask).mask_legend(word).to_png().unwrap()
    };
    assert_eq!(legend("masked", array![[false, true], [false, false]]), masked);
    assert_ne!(legend("skipped", array![[false, true], [false, false]]), masked);
    let none = Array2::from_elem((2, 2), false);
    assert_eq!(legend("skipped", none.clone()), legend("masked", none));
    // −∞ (a masked score) is masked without a mask; NaN is fine where masked.
    let scores = array![[1.0, f64::NEG_INFINITY], [0.5, -0.5]];
    assert!(
        grey(
            Heatmap::new(&scores)
                .scheme(ColorScheme::Diverging)
                .to_png()
                .unwrap()
        ) > 1000
    );
    let nan = array![[1.0, f64::NAN], [0.5, -0.5]];
    assert!(
        Heatmap::new(&nan)
            .masked(&array![[false, true], [false, false]])
            .to_png()
            .is_ok()
    );
}

#[test]
fn annotations_can_be_forced_either_way() {
    let on = Heatmap::new(&weights()).annotate(true).to_png().unwrap();
    let off = Heatmap::new(&weights()).annotate(false).to_png().unwrap();
    assert_ne!(on, off);
    assert_eq!(
        on,
        Heatmap::new(&weights()).to_png().unwrap(),
        "small matrices are annotated by default"
    );
}

#[test]
fn label_counts_are_checked() {
    let err = Heatmap::new(&weights())
        .row_labels(&["a", "b"])
        .to_png()
        .unwrap_err();
    assert_eq!(err.to_string(), "2 row labels for a matrix with 3 rows");
    let err = Heatmap::new(&weights())
        .col_labels(&["a", "b", "c", "d"])
        .to_png()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "4 column labels for a matrix with 3 columns"
    );
}

#[test]
fn bad_matrices_and_masks_are_errors() {
    let empty = Array2::<f64>::zeros((0, 3));
    let err = Heatmap::new(&empty).to_png().unwrap_err();
    assert!(
        matches!(
            err,
            FigureError::EmptyMatrix {
                rows: 0,
                cols: 3,
                ..
            }
        ),
        "{err}"
    );
    let err = Heatmap::new(&weights())
        .masked(&Array2::from_elem((2, 3), false))
        .to_png()
        .unwrap_err();
    assert_eq!(err.to_string(), "the mask is 2×3 but the matrix is 3×3");
    let err = Heatmap::new(&array![[1.0, f64::NAN]]).to_png().unwrap_err();
    assert!(err.to_string().contains("NaN at row 0, column 1"), "{err}");
    let err = Heatmap::new(&array![[f64::INFINITY]]).to_png().unwrap_err();
    assert!(matches!(err, FigureError::NonFinite { .. }), "{err}");
    let err = HeatmapGrid::new()
        .panel(Panel::new(&weights()))
        .panel(Panel::new(&array![[f64::NAN]]))
        .to_png()
        .unwrap_err();
    assert!(
        err.to_string().starts_with("panel 1 has the value NaN"),
        "{err}"
    );
}

#[test]
fn bad_ranges_are_errors() {
    for (low, high) in [
        (1.0, 0.0),
        (0.5, 0.5),
        (f64::NAN, 1.0),
        (0.0, f64::INFINITY),
    ] {
        let err = Heatmap::new(&weights())
            .range(ValueRange::Fixed(low, high))
            .to_png()
            .unwrap_err();
        assert!(matches!(err, FigureError::BadRange { .. }), "{err}");
    }
    let err = LineChart::new()
        .y_axis(Axis::Log10)
        .y_range(0.0, 1.0)
        .series("s", [(1.0, 1.0)])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::BadRange { .. }), "{err}");
}

#[test]
fn paths_are_checked_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = Heatmap::new(&weights())
        .save(dir.path().join("w.jpg"))
        .unwrap_err();
    assert!(
        matches!(err, FigureError::NotPng { .. }) && err.to_string().contains("w.jpg"),
        "{err}"
    );
    let missing = dir.path().join("no_such_dir").join("w.png");
    let err = Heatmap::new(&weights()).save(&missing).unwrap_err();
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    let err = LineChart::new()
        .series("s", [(1.0, 1.0)])
        .save(dir.path())
        .unwrap_err();
    assert!(matches!(err, FigureError::NotPng { .. }), "{err}");
}

#[test]
fn grids_check_their_panels_and_columns() {
    assert!(matches!(
        HeatmapGrid::new().to_png().unwrap_err(),
        FigureError::Nothing(_)
    ));
    let err = HeatmapGrid::new()
        .panel(Panel::new(&weights()))
        .columns(0)
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::ZeroColumns), "{err}");
    // Panels of different shapes are allowed and share the colour scale.
    let ok = HeatmapGrid::new()
        .panel(Panel::new(&weights()))
        .panel(Panel::new(&array![[0.5, 0.5]]))
        .columns(1);
    assert!(ok.to_png().is_ok());
}

#[test]
fn line_charts_check_their_points() {
    assert!(matches!(
        LineChart::new().to_png().unwrap_err(),
        FigureError::Nothing(_)
    ));
    let err = LineChart::new()
        .series("empty", Vec::<(f64, f64)>::new())
        .to_png()
        .unwrap_err();
    assert_eq!(err.to_string(), "series \"empty\" has no points");
    let err = LineChart::new()
        .x_axis(Axis::Log2)
        .series("d_k", [(0.0, 1.0)])
        .to_png()
        .unwrap_err();
    assert!(
        err.to_string().contains("x must be positive on a log axis"),
        "{err}"
    );
    let err = LineChart::new()
        .series("s", [(1.0, f64::NAN)])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::BadPoint { .. }), "{err}");
    let err = LineChart::new()
        .size(240, 240)
        .title("a\nb\nc\nd\ne\nf\ng")
        .series("s", [(1.0, 1.0)])
        .to_png()
        .unwrap_err();
    assert!(matches!(err, FigureError::Nothing(_)), "{err}");
    // One point, or a constant series, still draws.
    assert!(
        LineChart::new()
            .series("one", [(3.0, 3.0)])
            .to_png()
            .is_ok()
    );
    assert!(
        LineChart::new()
            .x_axis(Axis::Log10)
            .series("flat", [(1.0, 2.0), (100.0, 2.0)])
            .to_png()
            .is_ok()
    );
}

#[test]
fn huge_figures_are_refused_not_allocated() {
    let chart = LineChart::new()
        .size(u32::MAX, 300)
        .series("s", [(1.0, 1.0)]);
    assert!(matches!(
        chart.to_png().unwrap_err(),
        FigureError::TooLarge { .. }
    ));
    let tall = Array2::<f64>::zeros((5000, 1));
    let err = Heatmap::new(&tall).to_png().unwrap_err();
    assert!(matches!(err, FigureError::TooLarge { .. }), "{err}");
}

#[test]
fn odd_inputs_do_not_panic() {
    let one = array![[0.0]];
    for scheme in [ColorScheme::Sequential, ColorScheme::Diverging] {
        assert!(Heatmap::new(&one).scheme(scheme).to_png().is_ok());
        assert!(
            Heatmap::new(&array![[5.0, 5.0]])
                .scheme(scheme)
                .to_png()
                .is_ok()
        );
        let all_masked = array![[f64::NEG_INFINITY, f64::NEG_INFINITY]];
        assert!(Heatmap::new(&all_masked).scheme(scheme).to_png().is_ok());
    }
    let odd = [
        "",
        "a very long label that keeps going and going",
        "日本",
        "\u{1F600}",
    ];
    let m = Array2::from_elem((4, 4), 0.25);
    assert!(
        Heatmap::new(&m)
            .labels(&odd)
            .title("")
            .row_title("")
            .col_title("")
            .colorbar_label("")
            .to_png()
            .is_ok()
    );
    assert!(
        Heatmap::new(&array![[1e300, -1e300]])
            .precision(50)
            .to_png()
            .is_ok()
    );
    // Lines far outside a fixed range are clipped, not drawn off into memory.
    let clipped = LineChart::new()
        .y_range(0.0, 1.0)
        .series(
            "wild",
            [(0.0, 0.5), (1.0, 1e300), (2.0, -1e300), (3.0, 0.5)],
        )
        .to_png();
    assert!(clipped.is_ok(), "{clipped:?}");
    let extreme = LineChart::new()
        .series("", [(1e-300, 1e300), (1e300, 1e-300)])
        .to_png();
    assert!(extreme.is_ok(), "{extreme:?}");
}

#[test]
fn values_near_the_largest_float_do_not_panic() {
    for scheme in [ColorScheme::Sequential, ColorScheme::Diverging] {
        let m = array![[1.7e308, -1.7e308], [0.0, 1.0]];
        let result = Heatmap::new(&m).scheme(scheme).to_png();
        assert!(
            matches!(result, Err(FigureError::TooWide { .. })),
            "{result:?}"
        );
        let fixed = Heatmap::new(&m)
            .range(ValueRange::Fixed(-f64::MAX, f64::MAX))
            .to_png();
        assert!(
            matches!(fixed, Err(FigureError::TooWide { .. })),
            "{fixed:?}"
        );
        let narrow = Heatmap::new(&m).range(ValueRange::Fixed(0.0, 1.0)).to_png();
        assert!(
            narrow.is_ok(),
            "values outside a fixed range are clamped: {narrow:?}"
        );
    }
}

#[test]
fn chart_points_near_the_largest_float_do_not_panic() {
    let result = LineChart::new()
        .series("s", [(-1.7e308, -1.7e308), (1.7e308, 1.7e308)])
        .to_png();
    assert!(
        matches!(
            result,
            Err(FigureError::TooWide {
                what: "x values",
                ..
            })
        ),
        "{result:?}"
    );
}
