package proxy

import "time"

// SetClock makes s read the time from now.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// WarmStats is how many context reads s served whole from its warm cache (hits), from
// it plus the newer messages (deltas), and read whole (misses), and how many
// conversations and bytes the cache holds.
func WarmStats(s *Store) (hits, deltas, misses, convs, bytes int) {
	convs, bytes = s.warm.size()
	s.warm.mu.Lock()
	defer s.warm.mu.Unlock()
	return s.warm.hits, s.warm.deltas, s.warm.misses, convs, bytes
}

// SetWarmLimit bounds s's warm cache to n bytes.
func SetWarmLimit(s *Store, n int) { s.warm = newWarmCache(n) }
