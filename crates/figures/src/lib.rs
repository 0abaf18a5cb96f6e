//! Labelled heatmaps and charts (work in progress).
