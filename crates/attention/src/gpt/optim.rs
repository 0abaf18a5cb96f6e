//! Chapter *A model that writes*: the optimiser and its schedule.
