//! TEMPORARY: a stand-in for the `exact` and `grad` modules (being written on another
//! branch), with the contract's signatures, so that `learn` can be built and tuned before
//! they land. Deleted when they are merged.
#![allow(missing_docs, dead_code)]

pub mod grad {
    use ndarray::{Array2, Array3, Array4, ArrayRef3, ArrayRef4, Axis};

    use crate::exact::{exp, matmul};
    use crate::error::Result;
    use crate::mask::Mask;
    use crate::multihead::{MultiHeadAttention, merge_heads, split_heads};

    pub struct LayerTape<A> {
        x: Array3<A>,
        q: Array4<A>,
        k: Array4<A>,
        v: Array4<A>,
        weights: Array4<A>,
        drop: Option<Array4<A>>,
        merged: Array3<A>,
    }

    impl LayerTape<f64> {
        pub fn weights(&self) -> &Array4<f64> {
            &self.weights
        }
    }

    pub struct LayerGrads<A> {
        pub d_x: Array3<A>,
        pub d_w_q: Array2<A>,
        pub d_w_k: Array2<A>,
        pub d_w_v: Array2<A>,
        pub d_w_o: Array2<A>,
    }

    fn flat(x: &ArrayRef3<f64>) -> Array2<f64> {
        let (b, l, d) = x.dim();
        x.to_shape((b * l, d)).unwrap().into_owned()
    }

    fn proj(x: &ArrayRef3<f64>, w: &Array2<f64>) -> Array3<f64> {
        let (b, l, _) = x.dim();
        let y = matmul(&flat(x), w).unwrap();
        let d = y.ncols();
        y.into_shape_with_order((b, l, d)).unwrap()
    }

    pub trait Train {
        fn forward_train(
            &self,
            x: &ArrayRef3<f64>,
            mask: Option<&Mask>,
            drop: Option<&ArrayRef4<f64>>,
        ) -> Result<(Array3<f64>, LayerTape<f64>)>;
        fn backward(&self, tape: &LayerTape<f64>, d_y: &ArrayRef3<f64>)
        -> Result<LayerGrads<f64>>;
    }

    impl Train for MultiHeadAttention<f64> {
        fn forward_train(
            &self,
            x: &ArrayRef3<f64>,
            _mask: Option<&Mask>,
            drop: Option<&ArrayRef4<f64>>,
        ) -> Result<(Array3<f64>, LayerTape<f64>)> {
            let [wq, wk, wv, wo] = self.projections();
            let h = self.heads();
            let q = split_heads(&proj(x, wq.weight()), h)?;
            let k = split_heads(&proj(x, wk.weight()), h)?;
            let v = split_heads(&proj(x, wv.weight()), h)?;
            let scale = 1.0 / (self.d_head() as f64).sqrt();
            let mut kt = k.clone();
            kt.swap_axes(2, 3);
            let mut s = matmul(&q, &kt)?;
            s.mapv_inplace(|z| z * scale);
            for mut row in s.lanes_mut(Axis(3)) {
                let m = row.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                row.mapv_inplace(|z| exp(z - m));
                let mut sum = 0.0;
                for &e in row.iter() {
                    sum += e;
                }
                row.mapv_inplace(|e| e / sum);
            }
            let weights = s;
            let pd = match drop {
                Some(d) => &*weights * d,
                None => weights.clone(),
            };
            let o = matmul(&pd, &v)?;
            let merged = merge_heads(&o)?;
            let y = proj(&merged, wo.weight());
            let tape = LayerTape {
                x: x.to_owned(),
                q,
                k,
                v,
                weights,
                drop: drop.map(|d| d.to_owned()),
                merged,
            };
            Ok((y, tape))
        }

        fn backward(
            &self,
            t: &LayerTape<f64>,
            d_y: &ArrayRef3<f64>,
        ) -> Result<LayerGrads<f64>> {
            let [wq, wk, wv, wo] = self.projections();
            let h = self.heads();
            let scale = 1.0 / (self.d_head() as f64).sqrt();
            let d_w_o = matmul(&flat(&t.merged).t(), &flat(d_y))?;
            let d_merged = proj(d_y, &wo.weight().t().to_owned());
            let d_o = split_heads(&d_merged, h)?;
            let pd = match &t.drop {
                Some(d) => &*t.weights * &**d,
                None => t.weights.clone(),
            };
            let mut pdt = pd.clone();
            pdt.swap_axes(2, 3);
            let d_v = matmul(&pdt, &d_o)?;
            let mut vt = t.v.clone();
            vt.swap_axes(2, 3);
            let mut d_p = matmul(&d_o, &vt)?;
            if let Some(d) = &t.drop {
                d_p = d_p * d;
            }
            let mut d_s = d_p.clone();
            for ((mut ds, dp), p) in d_s
                .lanes_mut(Axis(3))
                .into_iter()
                .zip(d_p.lanes(Axis(3)))
                .zip(t.weights.lanes(Axis(3)))
            {
                let mut dot = 0.0;
                for (a, b) in dp.iter().zip(p.iter()) {
                    dot += a * b;
                }
                for ((s, &a), &b) in ds.iter_mut().zip(dp.iter()).zip(p.iter()) {
                    *s = b * (a - dot);
                }
            }
            let mut d_q = matmul(&d_s, &t.k)?;
            d_q.mapv_inplace(|z| z * scale);
            let mut dst = d_s.clone();
            dst.swap_axes(2, 3);
            let mut d_k = matmul(&dst, &t.q)?;
            d_k.mapv_inplace(|z| z * scale);
            let (dq, dk, dv) = (merge_heads(&d_q)?, merge_heads(&d_k)?, merge_heads(&d_v)?);
            let xf = flat(&t.x);
            let d_w_q = matmul(&xf.t(), &flat(&dq))?;
            let d_w_k = matmul(&xf.t(), &flat(&dk))?;
            let d_w_v = matmul(&xf.t(), &flat(&dv))?;
            let d_x = proj(&dq, &wq.weight().t().to_owned())
                + proj(&dk, &wk.weight().t().to_owned())
                + proj(&dv, &wv.weight().t().to_owned());
            Ok(LayerGrads { d_x, d_w_q, d_w_k, d_w_v, d_w_o })
        }
    }
}
