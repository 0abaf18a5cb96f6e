pub enum Axis{} pub struct LineChart;
