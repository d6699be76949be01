package views

import (
	"fmt"

	"homework/engine/spec"
)

// forecastBasis says what a forecast was taken from.
func forecastBasis(f *spec.Forecast) string {
	switch f.Basis {
	case spec.BasisLastTen:
		return "90th percentile of the last 10 iterations"
	case spec.BasisLastThree:
		if f.Samples == 1 {
			return "as much as the last iteration"
		}
		return fmt.Sprintf("the largest of the last %d iterations", f.Samples)
	case spec.BasisPastRuns:
		return fmt.Sprintf("from the first iterations of %d of your earlier runs like this one", f.Samples)
	}
	return f.Basis
}

// onForecastText says what happens when the next iteration would not fit.
func onForecastText(on string) string {
	switch on {
	case spec.ForecastStop:
		return "An iteration that would not fit is not started: the run stops."
	case spec.ForecastAsk:
		return "Before an iteration that would not fit, the run asks you."
	}
	return "Forecasts do not hold the run back (on_forecast off)."
}

// pluralWord picks one or many by n.
func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// WaitsOnForecast reports whether the run waits because its next iteration
// would not fit its budget: Continue with a raised budget resumes it.
func (v RunView) WaitsOnForecast() bool {
	return v.Run.Status == spec.StatusWaiting && v.Run.Waiting != nil && v.Run.Waiting.Reason == spec.WaitBudgetForecast
}
