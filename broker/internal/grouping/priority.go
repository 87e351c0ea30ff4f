package grouping

// MaxPriority is the highest message and member priority: levels 0 to 9, higher first, as
// broker.Dispatch.Check allows (TestMaxPriority holds the two together).
const MaxPriority = 9
