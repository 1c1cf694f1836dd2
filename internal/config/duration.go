package config

import "time"

func parseDuration(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	return int64(d), err
}

func formatDuration(d int64) string { return time.Duration(d).String() }

// String formats the duration like time.Duration.
func (d Duration) String() string { return formatDuration(int64(d)) }
