//go:build !lockrank

package lockrank

import "sync"

// Enabled says whether locks are checked (the lockrank build tag).
const Enabled = false

// Mutex is a sync.Mutex of rank R.
type Mutex[R Rank] = sync.Mutex

// RWMutex is a sync.RWMutex of rank R.
type RWMutex[R Rank] = sync.RWMutex
