// Command compare feeds the same simulated traffic to an in-process token
// bucket, GCRA, fixed window, sliding log and sliding counter, each allowing
// 10 requests per 10 s, and to a calendar window of 30 per minute of the
// wall clock, draws their decisions to docs/compare.svg and prints a
// summary.
//
// It runs on a ratelimittest.Clock, so it takes no real time and its output is the
// same on every run. Run it from this directory:
//
//	go run .
//
// -out sets where the SVG goes (default ../../docs/compare.svg, the
// repository's docs directory); -png also writes a 900×450 PNG.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

func main() {
	out := flag.String("out", filepath.Join("..", "..", "docs", "compare.svg"), "where to write the SVG picture")
	png := flag.String("png", "", "if set, where to write a PNG of the picture too")
	flag.Parse()
	if err := run(os.Stdout, *out, *png); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(stdout io.Writer, svgPath, pngPath string) error {
	reqs := Traffic()
	outs, err := Simulate(reqs)
	if err != nil {
		return err
	}
	if err := writeFile(svgPath, outs, WriteSVG); err != nil {
		return err
	}
	if pngPath != "" {
		if err := writeFile(pngPath, outs, WritePNG); err != nil {
			return err
		}
	}
	if err := summarize(stdout, reqs, outs); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "\nwrote %s\n", svgPath)
	return err
}

// writeFile renders outs with write into a buffer and writes it to path,
// whose directory must exist.
func writeFile(path string, outs []Outcome, write func(io.Writer, []Outcome) error) error {
	var buf bytes.Buffer
	if err := write(&buf, outs); err != nil {
		return fmt.Errorf("drawing %s: %w", path, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("%w (run from examples/compare, or pass -out)", err)
	}
	return nil
}

// summarize prints, per algorithm, the requests allowed and denied and the
// most allowed within any 1 s and any 10 s.
func summarize(w io.Writer, reqs []time.Duration, outs []Outcome) error {
	fmt.Fprintf(w, "%d requests over %.0f s of simulated time, to five limiters of %d per %.0f s\nand a calendar window of %d per minute (its minute ends at %.0f s):\n\n",
		len(reqs), horizon.Seconds(), limit, period.Seconds(), quota, boundary.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "algorithm\tallowed\tdenied\tmost in any 1 s\tmost in any 10 s\t")
	for _, o := range outs {
		ok, no := o.Counts()
		n1, at1 := Busiest(o.Allowed(), time.Second)
		n10, at10 := Busiest(o.Allowed(), 10*time.Second)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d (from %.2f s)\t%d (from %.2f s)\t\n",
			o.Name, ok, no, n1, at1.Seconds(), n10, at10.Seconds())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nThe fixed window opened at %.0f s by a lone request ends at %.0f s. Of the %d requests\n",
		opener.Seconds(), boundary.Seconds(), 2*limit)
	fmt.Fprintf(w, "in %.2f-%.2f s, around that boundary:",
		(boundary - limit*burstGap).Seconds(), (boundary + (limit-1)*burstGap).Seconds())
	for i, o := range outs {
		got, _ := o.Between(boundary-limit*burstGap, boundary+limit*burstGap)
		sep := ","
		if i == len(outs)-1 {
			sep = "."
		}
		fmt.Fprintf(w, " %s %d%s", o.Name, got, sep)
	}
	_, err := fmt.Fprintf(w, "\nA bucket never allows more than %d + 1/s × span in any span.\n", limit)
	return err
}
