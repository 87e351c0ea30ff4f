package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// scrape GETs url every interval until ctx is done, as a Prometheus server scraping the
// broker's /metrics would (Config.Scrape), and returns a summary for stderr: how often it
// scraped, how long a scrape took and how many failed. It measures what the metrics cost the
// broker, not the scraper: the bodies are read and dropped.
func scrape(ctx context.Context, url string, interval time.Duration) (summary func() string) {
	done := make(chan struct{})
	var n, failed int
	var total, worst time.Duration
	var size int64
	go func() {
		defer close(done)
		client := &http.Client{Timeout: 10 * time.Second}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			began := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			resp, err := client.Do(req)
			if err == nil {
				size, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s", resp.Status)
				}
			}
			if ctx.Err() != nil {
				return
			}
			if d := time.Since(began); err == nil {
				n++
				total += d
				worst = max(worst, d)
			} else {
				failed++
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() string {
		<-done
		mean := time.Duration(0)
		if n > 0 {
			mean = total / time.Duration(n)
		}
		return fmt.Sprintf("# scraper: %s every %v: %d scrapes (%d bytes the last), mean %v, worst %v, %d failed",
			url, interval, n, size, mean.Round(time.Microsecond), worst.Round(time.Microsecond), failed)
	}
}
