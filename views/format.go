// Package views renders pages as templ components from plain structs. It
// never touches the database.
package views

import "strconv"

func itoa(n int) string { return strconv.Itoa(n) }

// StatusTitle returns a friendly heading for an HTTP status.
func StatusTitle(status int) string {
	switch status {
	case 400:
		return "That request did not make sense"
	case 401:
		return "Please sign in"
	case 403:
		return "Not allowed"
	case 404:
		return "Not found"
	case 409:
		return "Not possible right now"
	case 429:
		return "Too many attempts"
	case 503:
		return "Not available"
	}
	if status >= 500 {
		return "Something went wrong on our side"
	}
	return "Error"
}
