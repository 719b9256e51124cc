package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// wgetOptions is the subset of wget's command line that KubeRay's probes use:
// `wget --tries 1 -T <seconds> -q -O- http://localhost:<port>/<path>`.
type wgetOptions struct {
	URL     string
	Output  string // "-" is stdout; "" means the URL's base name
	Quiet   bool
	Timeout time.Duration
	Tries   int
}

// parseWget reads wget's options: -q/--quiet, -O FILE/-OFILE/--output-document=FILE,
// -T SECONDS/--timeout=SECONDS, -t N/--tries N/--tries=N, and one URL. Other options are ignored.
func parseWget(args []string) (wgetOptions, error) {
	o := wgetOptions{Timeout: 900 * time.Second, Tries: 1}
	value := func(i *int, a, short, long string) (string, bool) {
		switch {
		case a == short || a == long:
			if *i+1 < len(args) {
				*i++
				return args[*i], true
			}
			return "", true
		case strings.HasPrefix(a, long+"="):
			return strings.TrimPrefix(a, long+"="), true
		case short != "" && strings.HasPrefix(a, short) && !strings.HasPrefix(a, "--"):
			return strings.TrimPrefix(a, short), true
		}
		return "", false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if v, ok := value(&i, a, "-O", "--output-document"); ok {
			o.Output = v
			continue
		}
		if v, ok := value(&i, a, "-T", "--timeout"); ok {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil || secs <= 0 {
				return o, fmt.Errorf("invalid timeout %q (want seconds > 0)", v)
			}
			o.Timeout = time.Duration(secs * float64(time.Second))
			continue
		}
		if v, ok := value(&i, a, "-t", "--tries"); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return o, fmt.Errorf("invalid number of tries %q", v)
			}
			if n == 0 {
				n = 20 // wget: 0 means "retry indefinitely"; bounded here
			}
			o.Tries = n
			continue
		}
		switch {
		case a == "-q" || a == "--quiet":
			o.Quiet = true
		case strings.HasPrefix(a, "-"):
			// ignored option
		case o.URL == "":
			o.URL = a
		default:
			return o, fmt.Errorf("more than one URL: %q and %q", o.URL, a)
		}
	}
	if o.URL == "" {
		return o, fmt.Errorf("missing URL")
	}
	return o, nil
}

// runWget fetches one URL with Go's resolver (which reads /etc/hosts; the static busybox wget
// cannot resolve "localhost" without glibc's NSS modules). It writes the body to the -O
// target and returns 0 on a 2xx answer, 1 otherwise, as wget does.
func runWget(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseWget(args)
	if err != nil {
		fmt.Fprintf(stderr, "wget: %v\n", err)
		return 1
	}
	client := http.Client{Timeout: o.Timeout}
	var lastErr error
	for try := 0; try < o.Tries; try++ {
		var body []byte
		body, lastErr = fetch(ctx, &client, o.URL)
		if lastErr == nil {
			if err := writeOutput(o, body, stdout); err != nil {
				fmt.Fprintf(stderr, "wget: %v\n", err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "wget: %v\n", lastErr)
	return 1
}

func fetch(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("server returned error: %s", resp.Status)
	}
	return body, nil
}

func writeOutput(o wgetOptions, body []byte, stdout io.Writer) error {
	out := o.Output
	if out == "" {
		out = o.URL[strings.LastIndex(o.URL, "/")+1:]
		if out == "" {
			out = "index.html"
		}
	}
	if out == "-" {
		_, err := stdout.Write(body)
		return err
	}
	return os.WriteFile(out, body, 0o644)
}
