//! The numbers the five seed notebooks printed, in one place.
//!
//! The book grew from five notebooks. Their random inputs cannot be regenerated (they were
//! drawn without a seed), but what they *printed* can be: given the printed inputs, this
//! crate must print the same outputs. The chapters quote these constants and the tests in
//! `tests/notebooks.rs` check them; nobody should copy them a second time.
//!
//! Each submodule gives, next to the numbers, the tolerance to compare with and why: a
//! notebook that printed 8 decimals is reproduced far more tightly than one that printed 4.
//! Build matrices with [`ndarray::arr2`]:
//!
//! ```
//! use attention::notebooks::nb004;
//! use ndarray::arr2;
//!
//! let q = arr2(&nb004::Q);
//! assert_eq!(q.dim(), (4, 8));
//! ```
//!
//! Anchors: none (the chapters quote single constants by name).

/// Notebook 000 (PyTorch, "The cat sat"): only the hand-made embeddings were printed.
pub mod nb000 {
    /// The sentence whose words index the rows of [`X`].
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb000::SENTENCE.split(' ').count(), 3);
    /// ```
    pub const SENTENCE: &str = "The cat sat";

    /// The hand-written embeddings, `(L, d_model) = (3, 4)`: one row per word of [`SENTENCE`].
    ///
    /// ```
    /// use attention::notebooks::nb000::X;
    /// assert_eq!(X[1], [0.0, 1.0, 0.0, 1.0]); // "cat"
    /// ```
    pub const X: [[f64; 4]; 3] = [
        [1.0, 0.0, 1.0, 0.0], // The
        [0.0, 1.0, 0.0, 1.0], // cat
        [1.0, 1.0, 0.0, 0.0], // sat
    ];
}

/// Notebook 001 (PyTorch): a 6×6 score matrix and its row softmax after dividing by √3.
pub mod nb001 {
    /// `d_k` of the notebook's projections (its embeddings have width 3 too).
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb001::D_K, 3);
    /// ```
    pub const D_K: usize = 3;

    /// The raw scores `Q·Kᵀ`, `(6, 6)`, as printed: 5 significant digits.
    ///
    /// ```
    /// use attention::notebooks::nb001::SCORES;
    /// assert_eq!(SCORES[0][0], -1.8795);
    /// ```
    pub const SCORES: [[f64; 6]; 6] = [
        [-1.8795e+00, -2.8734e+00, -1.0750e+00, -1.1436e+00, -2.5227e+00, -1.1112e-01],
        [-2.3830e+00, -3.7004e+00, -1.3775e+00, -1.4084e+00, -3.2607e+00, -3.9009e-02],
        [-8.9538e-01, -1.3941e+00, -4.2938e-01, -4.8184e-01, -1.1525e+00, -4.5575e-04],
        [-1.4712e+00, -2.2130e+00, -7.8770e-01, -8.9895e-01, -1.8970e+00, -1.4746e-01],
        [-1.9428e+00, -3.0416e+00, -1.0526e+00, -1.0919e+00, -2.6192e+00, 1.8658e-02],
        [-9.7863e-01, -1.3951e+00, -5.2670e-01, -6.6487e-01, -1.1975e+00, -2.3683e-01],
    ];

    /// `softmax(SCORES / √3)` row by row, `(6, 6)`, as printed: 4 decimals.
    ///
    /// ```
    /// use attention::notebooks::nb001::WEIGHTS;
    /// let row_sum: f64 = WEIGHTS[0].iter().sum();
    /// assert!((row_sum - 1.0).abs() < 1e-3);
    /// ```
    pub const WEIGHTS: [[f64; 6]; 6] = [
        [0.1227, 0.0691, 0.1952, 0.1877, 0.0846, 0.3406],
        [0.1055, 0.0493, 0.1884, 0.1851, 0.0635, 0.4081],
        [0.1456, 0.1092, 0.1906, 0.1849, 0.1255, 0.2441],
        [0.1341, 0.0874, 0.1990, 0.1866, 0.1049, 0.2880],
        [0.1161, 0.0615, 0.1940, 0.1897, 0.0785, 0.3602],
        [0.1493, 0.1174, 0.1938, 0.1789, 0.1316, 0.2291],
    ];

    /// Tolerance for [`WEIGHTS`]: `1e-4`.
    ///
    /// The weights were printed to 4 decimals (rounding error up to `5e-5`) from scores
    /// printed to 5 significant digits (which moves the recomputed weights by up to about
    /// `1e-5` more); the largest difference observed is `5.2e-5`.
    ///
    /// ```
    /// assert!(attention::notebooks::nb001::TOLERANCE < 1e-3);
    /// ```
    pub const TOLERANCE: f64 = 1e-4;
}

/// Notebook 002 (NumPy): `Q·Kᵀ`, its scaling and variances for the printed `Q` and `K`.
pub mod nb002 {
    /// `Q: (4, 8)` as printed (8 decimals).
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb002::Q.len(), 4);
    /// ```
    pub const Q: [[f64; 8]; 4] = [
        [0.09734245, -1.23944871, -1.95007434, -1.21171088, -1.39929826, -0.31226623, 0.31715713, -0.04633441],
        [-1.08375397, 0.66662904, -0.98343286, 0.0560969, 0.89519004, 0.10004913, -1.0552281, 0.69236504],
        [0.28716318, -1.82738228, 0.81813136, -1.68986197, 0.04376673, 0.3502005, -0.0423009, -0.41868561],
        [1.50431526, -0.22491201, -0.05686595, 0.33269655, 0.02673335, -0.1195548, -0.45053287, 0.6156462],
    ];

    /// `K: (4, 8)` as printed (8 decimals).
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb002::K[0].len(), 8);
    /// ```
    pub const K: [[f64; 8]; 4] = [
        [0.86628805, 0.94090168, -0.26610346, -0.64998308, 1.0927421, 0.84253231, 0.87369975, 1.05338847],
        [-1.424108, -0.32713153, 0.71388877, 0.61280272, 0.17939416, -0.87583657, -0.52110976, -1.161473],
        [-0.76329217, 1.07186251, -0.48726729, 0.67996207, 0.26643412, -0.89958272, 1.88396001, 0.49325744],
        [-1.71032029, -1.1453007, -0.91363038, -0.85842559, -1.24469381, -0.30221369, 1.13283269, 0.7531194],
    ];

    /// `Q·Kᵀ: (4, 4)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb002::QK_T[0][3], 6.23532513);
    /// ```
    pub const QK_T: [[f64; 4]; 4] = [
        [-1.33923421, -1.95682855, -0.79378427, 6.23532513],
        [0.78350543, 0.47631351, 0.56110739, 0.12197776],
        [-0.72506282, -0.05318572, -4.31516902, 1.78136061],
        [1.07380337, -2.27622329, -1.56581858, -2.59277681],
    ];

    /// `Q·Kᵀ / √8: (4, 4)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb002::SCALED[3][0], 0.37964682);
    /// ```
    pub const SCALED: [[f64; 4]; 4] = [
        [-0.47349079, -0.69184337, -0.28064512, 2.20452034],
        [0.277011, 0.16840226, 0.19838142, 0.04312565],
        [-0.25634842, -0.01880399, -1.52564264, 0.62980608],
        [0.37964682, -0.80476646, -0.55360047, -0.91668503],
    ];

    /// The printed population variances (NumPy's `var()`, `ddof = 0`) of `Q`, `K`, `Q·Kᵀ`
    /// and of the scaled scores, in that order.
    ///
    /// ```
    /// let [q, k, qk, scaled] = attention::notebooks::nb002::VARIANCES;
    /// assert!(qk > q && qk > k && scaled < qk);
    /// ```
    pub const VARIANCES: [f64; 4] = [0.7053850744157935, 0.867173339673601, 5.176241421279855, 0.6470301776599817];

    /// What the notebook printed as its causal attention weights. Its softmax divides by
    /// the sum of the *whole matrix* instead of each row, so the rows do not sum to 1: a
    /// pitfall the book discusses.
    ///
    /// ```
    /// let first_row: f64 = attention::notebooks::nb002::WHOLE_MATRIX_SOFTMAX[0].iter().sum();
    /// assert!(first_row < 0.1);
    /// ```
    pub const WHOLE_MATRIX_SOFTMAX: [[f64; 4]; 4] = [
        [0.07803034, 0.0, 0.0, 0.0],
        [0.16527315, 0.14826346, 0.0, 0.0],
        [0.09695434, 0.12295084, 0.02724707, 0.0],
        [0.18313716, 0.05602635, 0.07202319, 0.05009411],
    ];

    /// Tolerance for everything but `Q·Kᵀ` and its variance: `1e-8`, the last printed decimal.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb002::TOLERANCE, 1e-8);
    /// ```
    pub const TOLERANCE: f64 = 1e-8;

    /// Tolerance for `Q·Kᵀ` and its variance: `5e-8`.
    ///
    /// `Q` and `K` were printed to 8 decimals, so each entry is off by up to `5e-9`; a dot
    /// product of 8 such pairs adds those errors, weighted by the other factor's entries, to
    /// give up to about `Σ|qᵢ|·5e-9 + Σ|kᵢ|·5e-9 ≈ 8e-8` in the worst case. The largest
    /// difference observed is `1.7e-8`. Dividing by √8 brings the scaled scores under `1e-8`.
    ///
    /// ```
    /// assert!(
    ///     attention::notebooks::nb002::QK_TOLERANCE > attention::notebooks::nb002::TOLERANCE
    /// );
    /// ```
    pub const QK_TOLERANCE: f64 = 5e-8;
}

/// Notebook 003 (PyTorch): one query over a memory of keys and values, `Q = X[0]`,
/// `K = V = X`.
pub mod nb003 {
    /// `X: (4, 5)` as printed: 5 significant digits.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb003::X[0][2], 1.6987e-03);
    /// ```
    pub const X: [[f64; 5]; 4] = [
        [1.1550e+00, 1.3382e+00, 1.6987e-03, -1.2204e+00, 3.5535e-01],
        [-1.1931e+00, 9.6666e-01, 3.7223e-01, 2.2102e-01, 1.0763e+00],
        [9.9946e-02, -1.7015e-01, -1.2487e+00, 7.5870e-01, -4.2486e-01],
        [1.1354e+00, 1.1884e+00, -1.7155e+00, 5.7872e-01, 9.4685e-01],
    ];

    /// The row of [`X`] used as the query.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb003::QUERY_ROW, 0);
    /// ```
    pub const QUERY_ROW: usize = 0;

    /// The printed weights of the query over the 4 rows of `X` (4 decimals).
    ///
    /// ```
    /// let sum: f64 = attention::notebooks::nb003::WEIGHTS.iter().sum();
    /// assert!((sum - 1.0).abs() < 1e-3);
    /// ```
    pub const WEIGHTS: [f64; 4] = [0.6394, 0.0777, 0.0450, 0.2378];

    /// The printed output, `Σᵢ wᵢ·X[i]` (4 decimals).
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb003::OUTPUT.len(), 5);
    /// ```
    #[allow(clippy::approx_constant)] // -0.4342 is a printed output, not log10(e)
    pub const OUTPUT: [f64; 5] = [0.9203, 1.2058, -0.4342, -0.5913, 0.5169];

    /// Tolerance for [`WEIGHTS`] and [`OUTPUT`]: `1e-4`.
    ///
    /// Both were printed to 4 decimals (up to `5e-5` of rounding), and `X` itself only to 5
    /// significant digits, which moves the recomputed numbers by up to about `2e-5` more;
    /// the largest difference observed is `6.1e-5`. A tighter check is impossible from what
    /// was printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb003::TOLERANCE, 1e-4);
    /// ```
    pub const TOLERANCE: f64 = 1e-4;
}

/// Notebook 004 (NumPy, "my name is Aj"): the full causal walk-through, 8 decimals.
pub mod nb004 {
    /// The sentence whose 4 tokens are the rows of `Q`, `K` and `V`.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::SENTENCE.split(' ').count(), 4);
    /// ```
    pub const SENTENCE: &str = "my name is Aj";

    /// `d_k = d_v = 8`.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::D_K, 8);
    /// ```
    pub const D_K: usize = 8;

    /// `Q: (4, 8)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::Q[0][1], -2.54870451);
    /// ```
    pub const Q: [[f64; 8]; 4] = [
        [0.11672673, -2.54870451, -1.44065948, 0.93661829, 1.36278968, 1.04252277, -0.01310938, -1.3163937],
        [0.26721599, -0.90218255, 0.07417847, -0.10430246, 0.52684253, -0.07081531, -0.60511725, -0.55225527],
        [-0.93297509, 0.28724456, 1.37184579, 0.41589874, 0.34981245, -0.24753755, -1.24497125, 0.05044148],
        [-0.11414585, -0.01545749, -0.58376828, -0.40193907, 0.93931836, -1.94334363, -0.34770465, 1.50103406],
    ];

    /// `K: (4, 8)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::K[3][7], 1.49744622);
    /// ```
    pub const K: [[f64; 8]; 4] = [
        [1.1226585, -0.85645535, 0.54315044, 1.36560451, 0.52539476, -0.94502504, -0.48444661, 0.46268014],
        [-0.53713766, -1.16937329, -0.57988617, 0.92713577, -0.85995607, -0.40352635, 0.26555146, -1.83159914],
        [-2.06994435, -0.09514715, -1.64928361, -0.17375184, 0.13146819, -1.76335363, 1.56568846, 0.69751826],
        [0.32910684, -0.1939204, -0.80444134, 0.78816869, 0.35599408, 0.28309835, -0.25970963, 1.49744622],
    ];

    /// `V: (4, 8)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::V[0][0], -0.00368231);
    /// ```
    pub const V: [[f64; 8]; 4] = [
        [-0.00368231, 1.43739233, -0.59614565, -1.23171219, 1.12030717, -0.98620738, -0.15461465, -1.03106383],
        [0.85585446, -1.79878344, 0.67321704, 0.05607552, -0.15542661, -1.41264124, -0.40136933, -1.17626611],
        [0.50465335, 2.28693419, 0.67128338, 0.2506863, 1.78802234, 0.14775751, -0.11405725, 0.88026286],
        [-0.68069105, 0.68385101, 0.17994557, -1.68013201, 0.91543969, -0.19108312, 0.03160471, 1.40527326],
    ];

    /// `Q·Kᵀ: (4, 4)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::QK_T[0][1], 5.43647918);
    /// ```
    pub const QK_T: [[f64; 4]; 4] = [
        [1.9385252, 5.43647918, -0.38370563, 1.24225801],
        [1.35187753, 1.19807371, -1.70999851, -0.38129862],
        [1.06382646, -0.86860778, -1.86251774, -0.68520405],
        [2.21209236, -2.81995366, 5.32327746, 2.24049732],
    ];

    /// `Q·Kᵀ / √8: (4, 4)` as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::SCALED[0][1], 1.92208565);
    /// ```
    pub const SCALED: [[f64; 4]; 4] = [
        [0.68537216, 1.92208565, -0.13566043, 0.43920453],
        [0.47796088, 0.42358302, -0.60457577, -0.13480942],
        [0.37611945, -0.30709922, -0.65849946, -0.24225621],
        [0.78209275, -0.99700418, 1.88206279, 0.79213542],
    ];

    /// The printed population variances (`ddof = 0`) of `Q`, `K`, `Q·Kᵀ` and the scaled
    /// scores, in that order: scaling by √8 divides the variance of the scores by 8.
    ///
    /// ```
    /// let [_, _, qk, scaled] = attention::notebooks::nb004::VARIANCES;
    /// assert!((qk / scaled - 8.0).abs() < 1e-9);
    /// ```
    pub const VARIANCES: [f64; 4] = [0.8672192297664698, 0.9229851723027697, 5.1446872979260165, 0.643085912240752];

    /// The causal attention weights `softmax(SCALED + M)`, `(4, 4)`, as printed.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::CAUSAL_WEIGHTS[0], [1.0, 0.0, 0.0, 0.0]);
    /// ```
    pub const CAUSAL_WEIGHTS: [[f64; 4]; 4] = [
        [1.0, 0.0, 0.0, 0.0],
        [0.51359112, 0.48640888, 0.0, 0.0],
        [0.53753304, 0.27144826, 0.1910187, 0.0],
        [0.19293995, 0.03256643, 0.57960627, 0.19488734],
    ];

    /// The new values `CAUSAL_WEIGHTS · V`, `(4, 8)`, as printed.
    ///
    /// ```
    /// use attention::notebooks::nb004::{NEW_V, V};
    /// assert_eq!(NEW_V[0], V[0]); // the first token can only see itself
    /// ```
    pub const NEW_V: [[f64; 8]; 4] = [
        [-0.00368231, 1.43739233, -0.59614565, -1.23171219, 1.12030717, -0.98620738, -0.15461465, -1.03106383],
        [0.41440401, -0.13671232, 0.02128364, -0.60532081, 0.49977893, -1.1936286, -0.27463831, -1.10169151],
        [0.32673907, 0.72121642, -0.00947672, -0.59897862, 0.90155754, -0.88535361, -0.21384855, -0.7053796],
        [0.18700384, 1.67754576, 0.33105314, -0.41795742, 1.4258469, -0.18788199, -0.10285145, 0.54683565],
    ];

    /// Tolerance for everything but `Q·Kᵀ` and its variance: `1e-8`, the last printed decimal.
    ///
    /// ```
    /// assert_eq!(attention::notebooks::nb004::TOLERANCE, 1e-8);
    /// ```
    pub const TOLERANCE: f64 = 1e-8;

    /// Tolerance for `Q·Kᵀ` and its variance: `5e-8` (largest difference observed `2.7e-8`).
    ///
    /// `Q` and `K` were printed to 8 decimals, so every input is off by up to `5e-9`; a dot
    /// product over `d_k = 8` pairs adds up those input errors, weighted by the other factor,
    /// to at most `Σ|qᵢ|·5e-9 + Σ|kᵢ|·5e-9 ≈ 9e-8` here. The scaled scores are `√8` times
    /// less affected and meet `1e-8`.
    ///
    /// ```
    /// assert!(attention::notebooks::nb004::QK_TOLERANCE < 1e-7);
    /// ```
    pub const QK_TOLERANCE: f64 = 5e-8;
}
