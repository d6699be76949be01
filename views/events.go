package views

//go:generate go run ./eventsgen
