package daemon

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/fake"
)

// Protocol limits and constants (hack/simgpu/c/simgpu_client.h).
const (
	// MaxLine is the longest request or answer line in bytes, "\n" included.
	MaxLine = 4096
	// HandleBase is the first allocation handle: handles look like device pointers.
	HandleBase = 0x7f0000000000
	// HandleAlign is the alignment and granularity of allocation handles, 2 MiB.
	HandleAlign = 2 << 20
)

// Config is a daemon's configuration.
type Config struct {
	// DriverVersion is the kernel driver version, e.g. "580.95.05".
	DriverVersion string
	// CUDAVersion is the CUDA driver API version (1000*major + 10*minor).
	CUDAVersion int
	// Devices are the simulated GPUs in host order.
	Devices []Device
}

// Event is one injected XID.
type Event struct {
	Seq   uint64 `json:"seq"`
	Index int    `json:"index"`
	XID   uint64 `json:"xid"`
}

// alloc is one memory allocation, owned by one connection.
type alloc struct {
	dev   int
	bytes uint64
	owner *conn
}

// conn is one client connection: one process (pid from SO_PEERCRED).
type conn struct {
	pid    int32
	name   string
	allocs map[uint64]struct{}
	ctxs   map[int]int // live CUDA contexts per device index (CTX/CTXEND)
}

// Server is the simulated driver's state and socket server. Safe for concurrent use.
type Server struct {
	cfg Config

	mu     sync.Mutex
	allocs map[uint64]*alloc
	used   []uint64 // bytes in use per device
	conns  map[*conn]struct{}
	next   uint64 // next handle offset from HandleBase
	events []Event
	broken []bool // per device: broken by a non-application XID until RECOVER
}

// New makes a daemon; DriverVersion and CUDAVersion default to DefaultDriverVersion and
// DefaultCUDAVersion.
func New(cfg Config) *Server {
	if cfg.DriverVersion == "" {
		cfg.DriverVersion = DefaultDriverVersion
	}
	if cfg.CUDAVersion == 0 {
		cfg.CUDAVersion = DefaultCUDAVersion
	}
	n := len(cfg.Devices)
	return &Server{cfg: cfg, allocs: map[uint64]*alloc{}, used: make([]uint64, n), broken: make([]bool, n), conns: map[*conn]struct{}{}}
}

// Listen creates the Unix socket at path (replacing a stale socket file), mode 0666 so that
// containers running as any user can reach it, as they reach the real driver's device nodes.
func Listen(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; not replacing it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

// Serve answers connections on ln until ctx ends (then it closes ln) or ln fails.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		context.AfterFunc(ctx, func() { _ = c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(c)
		}()
	}
}

// serveConn answers one connection's requests, then frees its allocations (as the kernel
// frees a dead process's GPU memory).
func (s *Server) serveConn(nc net.Conn) {
	defer nc.Close()
	c := &conn{pid: peerPID(nc), allocs: map[uint64]struct{}{}, ctxs: map[int]int{}}
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer s.release(c)
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, MaxLine), MaxLine)
	w := bufio.NewWriter(nc)
	for sc.Scan() {
		ans := s.handle(c, sc.Text())
		if len(ans) >= MaxLine {
			ans = "ERR INVALID answer longer than " + strconv.Itoa(MaxLine) + " bytes"
		}
		if _, err := w.WriteString(ans + "\n"); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
	if err := sc.Err(); err != nil {
		klog.V(2).InfoS("Client connection failed", "pid", c.pid, "client", c.name, "err", err)
	}
}

// peerPID is the host pid of the connection's peer (SO_PEERCRED), 0 when unknown.
func peerPID(nc net.Conn) int32 {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	var pid int32
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = cred.Pid
		}
	})
	return pid
}

// release frees all of c's allocations and ends its contexts.
func (s *Server) release(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	c.ctxs = nil
	for h := range c.allocs {
		a := s.allocs[h]
		s.used[a.dev] -= a.bytes
		delete(s.allocs, h)
	}
	if len(c.allocs) > 0 {
		klog.V(2).InfoS("Freed a closed connection's memory", "pid", c.pid, "client", c.name, "allocations", len(c.allocs))
	}
	c.allocs = nil
}

// errAnswer formats an error answer; code is INVALID, NOT_FOUND, OOM or LOST.
func errAnswer(code, format string, args ...any) string {
	return "ERR " + code + " " + fmt.Sprintf(format, args...)
}

// handle answers one request line of connection c (without the "\n").
func (s *Server) handle(c *conn, line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return errAnswer("INVALID", "empty request")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch f[0] {
	case "HELLO":
		if len(f) > 1 {
			c.name = f[1]
		}
		return fmt.Sprintf("OK %s %d %d", s.cfg.DriverVersion, s.cfg.CUDAVersion, len(s.cfg.Devices))
	case "DEV", "MEM", "PROCS", "TOPO", "RECOVER":
		if len(f) != 2 {
			return errAnswer("INVALID", "usage: %s <index>", f[0])
		}
		i, err := s.index(f[1])
		if err != nil {
			return errAnswer("INVALID", "%v", err)
		}
		return s.deviceAnswer(f[0], i)
	case "CTX", "CTXEND":
		if len(f) != 2 {
			return errAnswer("INVALID", "usage: %s <index>", f[0])
		}
		i, err := s.index(f[1])
		if err != nil {
			return errAnswer("INVALID", "%v", err)
		}
		return c.context(f[0] == "CTX", i)
	case "ALLOC":
		if len(f) != 3 {
			return errAnswer("INVALID", "usage: ALLOC <index> <bytes>")
		}
		i, err := s.index(f[1])
		if err != nil {
			return errAnswer("INVALID", "%v", err)
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil || n == 0 {
			return errAnswer("INVALID", "bytes %q is not a positive integer", f[2])
		}
		if s.broken[i] {
			return lost(i)
		}
		return s.alloc(c, i, n)
	case "FREE":
		if len(f) != 2 {
			return errAnswer("INVALID", "usage: FREE <handle>")
		}
		h, err := strconv.ParseUint(f[1], 0, 64)
		if err != nil {
			return errAnswer("INVALID", "handle %q is not an integer", f[1])
		}
		a, ok := s.allocs[h]
		if !ok || a.owner != c {
			return errAnswer("NOT_FOUND", "no allocation %#x of this process", h)
		}
		s.used[a.dev] -= a.bytes
		delete(s.allocs, h)
		delete(c.allocs, h)
		return fmt.Sprintf("OK %d", a.bytes)
	case "EVENTS":
		if len(f) != 2 {
			return errAnswer("INVALID", "usage: EVENTS <since-seq>")
		}
		since, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return errAnswer("INVALID", "since-seq %q is not an integer", f[1])
		}
		var b strings.Builder
		fmt.Fprintf(&b, "OK %d", len(s.events))
		for _, e := range s.events {
			if e.Seq > since {
				if b.Len() > MaxLine-64 {
					break // the client asks again from the last seq it got
				}
				fmt.Fprintf(&b, " %d:%d:%d", e.Seq, e.Index, e.XID)
			}
		}
		return b.String()
	case "XID":
		if len(f) != 3 {
			return errAnswer("INVALID", "usage: XID <index> <xid>")
		}
		i, err := s.index(f[1])
		if err != nil {
			return errAnswer("INVALID", "%v", err)
		}
		x, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return errAnswer("INVALID", "xid %q is not an integer", f[2])
		}
		e := Event{Seq: uint64(len(s.events)) + 1, Index: i, XID: x}
		s.events = append(s.events, e)
		broken := !isApplicationXID(x)
		if broken {
			s.broken[i] = true
		}
		klog.InfoS("Injected XID", "index", i, "uuid", s.cfg.Devices[i].UUID, "xid", x, "seq", e.Seq, "broken", broken)
		return fmt.Sprintf("OK %d", e.Seq)
	}
	return errAnswer("INVALID", "unknown request %q", f[0])
}

// index parses a device index.
func (s *Server) index(arg string) (int, error) {
	i, err := strconv.Atoi(arg)
	if err != nil || i < 0 || i >= len(s.cfg.Devices) {
		return 0, fmt.Errorf("device %q is not an index 0..%d", arg, len(s.cfg.Devices)-1)
	}
	return i, nil
}

// isApplicationXID reports whether xid is one of fake.ApplicationXIDs: injecting it only
// delivers the event; any other XID also breaks the GPU (pkg/fake's fault model).
func isApplicationXID(xid uint64) bool {
	for _, x := range fake.ApplicationXIDs() {
		if x == xid {
			return true
		}
	}
	return false
}

// lost is the answer to a memory or process request on broken device i.
func lost(i int) string {
	return errAnswer("LOST", "device %d is lost after an XID; RECOVER %d to repair it", i, i)
}

// deviceAnswer answers DEV, MEM, PROCS, TOPO or RECOVER for device i. DEV and TOPO (identity
// and topology) answer on a broken device too; MEM and PROCS answer ERR LOST. Callers hold s.mu.
func (s *Server) deviceAnswer(req string, i int) string {
	d := s.cfg.Devices[i]
	switch req {
	case "DEV":
		return fmt.Sprintf("OK %s %d %d %s %d %d 0x%08X %s", d.UUID, d.Minor, d.TotalBytes, d.PCIBusID, d.NUMA,
			d.SMs, d.PCIDeviceID, d.Name)
	case "TOPO":
		return fmt.Sprintf("OK %d", d.NVLinks)
	case "RECOVER":
		if s.broken[i] {
			s.broken[i] = false
			klog.InfoS("Recovered GPU", "index", i, "uuid", d.UUID)
		}
		return "OK"
	}
	if s.broken[i] {
		return lost(i)
	}
	switch req {
	case "MEM":
		return fmt.Sprintf("OK %d %d", d.TotalBytes, s.used[i])
	}
	perPID := map[int32]uint64{}
	for c := range s.conns {
		if _, listed := perPID[c.pid]; c.ctxs[i] > 0 && !listed {
			perPID[c.pid] = 0 // listed from its first context on, as the driver lists it
		}
	}
	for _, a := range s.allocs {
		if a.dev == i {
			perPID[a.owner.pid] += a.bytes
		}
	}
	pids := make([]int32, 0, len(perPID))
	for p := range perPID {
		pids = append(pids, p)
	}
	sort.Slice(pids, func(a, b int) bool { return pids[a] < pids[b] })
	var b strings.Builder
	fmt.Fprintf(&b, "OK %d", len(pids))
	for _, p := range pids {
		fmt.Fprintf(&b, " %d:%d", p, perPID[p])
	}
	return b.String()
}

// context counts a CUDA context of c on device i made (create) or ended: a process is in
// device i's PROCS list from its first context there, holding memory or not, as the driver lists
// a process with a context in nvmlDeviceGetComputeRunningProcesses. HAMi-core finds its host PID
// by that (set_task_pid: the PID new in the list after cuDevicePrimaryCtxRetain). Contexts take
// no device memory here. CTXEND on a device where c has no context answers ERR NOT_FOUND. Callers
// hold s.mu.
func (c *conn) context(create bool, i int) string {
	if create {
		c.ctxs[i]++
		return fmt.Sprintf("OK %d", c.ctxs[i])
	}
	if c.ctxs[i] == 0 {
		return errAnswer("NOT_FOUND", "no context of this connection on device %d", i)
	}
	c.ctxs[i]--
	return fmt.Sprintf("OK %d", c.ctxs[i])
}

// alloc reserves n bytes on device i for c. Callers hold s.mu.
func (s *Server) alloc(c *conn, i int, n uint64) string {
	total := s.cfg.Devices[i].TotalBytes
	if n > total || s.used[i] > total-n {
		return errAnswer("OOM", "device %d: %d bytes requested, %d of %d in use", i, n, s.used[i], total)
	}
	h := uint64(HandleBase) + s.next
	s.next += (n + HandleAlign - 1) / HandleAlign * HandleAlign
	s.allocs[h] = &alloc{dev: i, bytes: n, owner: c}
	c.allocs[h] = struct{}{}
	s.used[i] += n
	return fmt.Sprintf("OK %d", h)
}
