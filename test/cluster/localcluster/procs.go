package localcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a component started by the harness, known by the id and the
// executable recorded in the state folder.
type Process struct {
	Name string
	PID  int
	Exe  string
}

func (s State) pidFile(name string) string { return s.path("pids", name) }

// Start runs a component in a session of its own (so it outlives the
// command that started it and a Ctrl-C reaches only the harness, which then
// tears down), logging to logs/<name>.log, and records its id before
// returning. exited is closed when the process ends while this program runs.
func (s State) Start(name, exe string, args ...string) (p Process, exited <-chan struct{}, err error) {
	if err := os.MkdirAll(s.LogDir(), 0o755); err != nil {
		return p, nil, err
	}
	if err := os.MkdirAll(s.path("pids"), 0o755); err != nil {
		return p, nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(s.LogDir(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return p, nil, err
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), exe, strings.Join(args, " "))
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return p, nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p = Process{Name: name, PID: cmd.Process.Pid, Exe: exe}
	if err := os.WriteFile(s.pidFile(name), []byte(fmt.Sprintf("%d %s\n", p.PID, exe)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return p, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return p, done, nil
}

// Recorded returns the processes recorded in the state folder.
func (s State) Recorded() ([]Process, error) {
	entries, err := os.ReadDir(s.path("pids"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Process
	for _, e := range entries {
		p, err := s.recorded(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func (s State) recorded(name string) (Process, error) {
	data, err := os.ReadFile(s.pidFile(name))
	if err != nil {
		return Process{}, err
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return Process{}, fmt.Errorf("%s: want \"<pid> <executable>\", got %q", s.pidFile(name), data)
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil {
		return Process{}, fmt.Errorf("%s: %w", s.pidFile(name), err)
	}
	return Process{Name: name, PID: pid, Exe: fields[1]}, nil
}

// Alive reports whether the recorded process still runs: its id is live and
// still runs the recorded executable (an id reused by another program is not
// ours).
func (p Process) Alive() bool { return pidRuns(p.PID, p.Exe) }

func pidRuns(pid int, exe string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses; Z is a zombie.
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	if exe == "" {
		return true
	}
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	return strings.TrimSuffix(got, " (deleted)") == exe
}

// Stop ends the process: SIGTERM, then SIGKILL after grace. It is a no-op
// when the process is gone or its id now belongs to another program.
func (p Process) Stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s (pid %d): %w", p.Name, p.PID, err)
	}
	if waitGone(p.PID, p.Exe, grace) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	if waitGone(p.PID, p.Exe, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.Name, p.PID)
}

func waitGone(pid int, exe string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !pidRuns(pid, exe) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopRecorded stops the named component and forgets it.
func (s State) StopRecorded(name string, grace time.Duration) error {
	p, err := s.recorded(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := p.Stop(grace); err != nil {
		return err
	}
	return os.Remove(s.pidFile(name))
}

// processesWhere returns the ids of live processes whose command line
// satisfies match.
func processesWhere(match func(args []string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(data) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")) && pidRuns(pid, "") {
			pids = append(pids, pid)
		}
	}
	return pids
}
