package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrNoDaemon is returned by Dial when nothing listens on the socket.
var ErrNoDaemon = errors.New("no simgpu daemon")

// Error is an "ERR <code> <message>" answer.
type Error struct {
	// Code is INVALID, NOT_FOUND, OOM or LOST.
	Code string
	// Message is the daemon's explanation.
	Message string
}

func (e *Error) Error() string { return "simgpu: " + e.Code + ": " + e.Message }

// Client is a Go client of the daemon (one connection; not safe for concurrent use). The C
// client in hack/simgpu/c is what simulated libraries use; this one serves the CLI and tests.
type Client struct {
	c net.Conn
	r *bufio.Reader
}

// Dial connects to the daemon at socket and says HELLO as name.
func Dial(socket, name string) (*Client, error) {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %v", ErrNoDaemon, socket, err)
	}
	cl := &Client{c: c, r: bufio.NewReaderSize(c, MaxLine)}
	if _, err := cl.Request("HELLO " + name); err != nil {
		_ = c.Close()
		return nil, err
	}
	return cl, nil
}

// Close closes the connection; the daemon frees its allocations.
func (c *Client) Close() error { return c.c.Close() }

// Request sends one request line and returns the answer after "OK" (trimmed), or an *Error.
func (c *Client) Request(req string) (string, error) {
	if strings.ContainsRune(req, '\n') || len(req) >= MaxLine {
		return "", fmt.Errorf("request %q: not one line under %d bytes", req, MaxLine)
	}
	if _, err := c.c.Write([]byte(req + "\n")); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("reading the answer to %q: %w", req, err)
	}
	line = strings.TrimSuffix(line, "\n")
	if rest, ok := strings.CutPrefix(line, "OK"); ok {
		return strings.TrimSpace(rest), nil
	}
	if rest, ok := strings.CutPrefix(line, "ERR "); ok {
		code, msg, _ := strings.Cut(rest, " ")
		return "", &Error{Code: code, Message: msg}
	}
	return "", fmt.Errorf("answer to %q is neither OK nor ERR: %q", req, line)
}

// Devices lists the daemon's devices (HELLO's count, then DEV and TOPO for each).
func (c *Client) Devices() ([]Device, error) {
	hello, err := c.Request("HELLO simgpu-go")
	if err != nil {
		return nil, err
	}
	f := strings.Fields(hello)
	if len(f) != 3 {
		return nil, fmt.Errorf("HELLO answer %q: want <driver> <cuda> <count>", hello)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, fmt.Errorf("HELLO answer %q: %w", hello, err)
	}
	out := make([]Device, n)
	for i := range out {
		ans, err := c.Request("DEV " + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		if out[i], err = parseDev(i, ans); err != nil {
			return nil, err
		}
		topo, err := c.Request("TOPO " + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		if out[i].NVLinks, err = strconv.Atoi(topo); err != nil {
			return nil, fmt.Errorf("TOPO %d answer %q: %w", i, topo, err)
		}
	}
	return out, nil
}

// parseDev reads a DEV answer (after "OK ").
func parseDev(i int, ans string) (Device, error) {
	f := strings.SplitN(ans, " ", 8)
	if len(f) != 8 {
		return Device{}, fmt.Errorf("DEV %d answer %q: want 8 fields", i, ans)
	}
	d := Device{Index: i, UUID: f[0], PCIBusID: f[3], Name: f[7]}
	var errs []error
	atoi := func(s string) int {
		v, err := strconv.Atoi(s)
		errs = append(errs, err)
		return v
	}
	d.Minor, d.NUMA, d.SMs = atoi(f[1]), atoi(f[4]), atoi(f[5])
	total, err := strconv.ParseUint(f[2], 10, 64)
	errs = append(errs, err)
	id, err := strconv.ParseUint(f[6], 0, 32)
	errs = append(errs, err)
	d.TotalBytes, d.PCIDeviceID = total, uint32(id)
	if err := errors.Join(errs...); err != nil {
		return Device{}, fmt.Errorf("DEV %d answer %q: %w", i, ans, err)
	}
	return d, nil
}
