package views

import "homework/engine/spec"

// unreadURL is where the unread count refreshes from; on a run's page it
// names the run, whose notifications the person is reading.
func unreadURL(viewing string) string {
	if viewing == "" {
		return "/notifications/count"
	}
	return "/notifications/count?viewing=" + queryEscape(viewing)
}

// NotificationGroup is one run's notifications on the notifications page,
// newest first; notifications of no run (the account's webhooks) form a
// group with RunID "".
type NotificationGroup struct {
	RunID  string
	Run    *spec.Run // nil when not a run's, or the run is gone
	Items  []*spec.Notification
	Unread int
}

// GroupNotifications groups items (newest first) by run, in the order of
// each run's newest notification.
func GroupNotifications(items []*spec.Notification) []*NotificationGroup {
	var groups []*NotificationGroup
	byRun := map[string]*NotificationGroup{}
	for _, n := range items {
		g := byRun[n.RunID]
		if g == nil {
			g = &NotificationGroup{RunID: n.RunID}
			byRun[n.RunID] = g
			groups = append(groups, g)
		}
		g.Items = append(g.Items, n)
		if n.ReadAt.IsZero() {
			g.Unread++
		}
	}
	return groups
}

// heading names the group: the run's objective, else its newest
// notification's title.
func (g *NotificationGroup) heading() string {
	switch {
	case g.Run != nil:
		return clip(g.Run.Objective, 120)
	case g.RunID == "":
		return "Your account"
	}
	return g.Items[0].Title
}

// groupKey is the group's element id suffix.
func groupKey(g *NotificationGroup) string {
	if g.RunID == "" {
		return "account"
	}
	return g.RunID
}
