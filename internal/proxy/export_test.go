package proxy

import "time"

// SetClock makes s read the time from now.
func SetClock(s *Store, now func() time.Time) { s.now = now }
