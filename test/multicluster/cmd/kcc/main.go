// Command kcc runs, as Pods of a real cluster, the Config Connector
// namespace-mode workload the multi-cluster suite runs in-process: the
// same packages, not a second copy. The kind stage builds it into an image
// of its own (hack/kind/e2e.sh; nothing pulled) and test/cluster's
// namespacemode tests deploy it:
//
//	kcc manager      one namespace-mode controller manager: client-go's
//	                 LeaderElector over the MultiClusterLease lock
//	                 (kccmanager), as the Pod's own ServiceAccount; it
//	                 reconciles only while it leads and exits the process
//	                 on a lost leadership, as Config Connector's manager
//	                 does, for the kubelet to restart. GET /status on
//	                 --listen says whether it leads now, and its counters.
//	kcc controller   the MultiClusterLease controller (mclcontroller) as the
//	                 Pod's ServiceAccount, its global locks in the GCS
//	                 emulator at --gcs-endpoint.
//	kcc gcs-emulator the GCS emulator (gcsemulator) on --listen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/storage"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"google.golang.org/api/option"
	"k8s.io/client-go/rest"

	"github.com/leaseguard/leaseguard/test/multicluster/gcsemulator"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
	"github.com/leaseguard/leaseguard/test/multicluster/mclcontroller"
)

const usage = `usage: kcc manager|controller|gcs-emulator [flags] (kcc <command> -h: its flags)`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, time.Now().UTC().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{Verbosity: 1})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch os.Args[1] {
	case "manager":
		err = runManager(ctx, os.Args[2:], log)
	case "controller":
		err = runController(ctx, os.Args[2:], log)
	case "gcs-emulator":
		err = runEmulator(ctx, os.Args[2:], log)
	default:
		err = fmt.Errorf("unknown command %q\n%s", os.Args[1], usage)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcc "+os.Args[1]+":", err)
		os.Exit(1)
	}
}

// podNamespace is the namespace the Pod runs in, from the ServiceAccount's
// mounted files.
func podNamespace() (string, error) {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "", fmt.Errorf("the Pod's namespace: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// managerStatus is what GET /status answers.
type managerStatus struct {
	Identity   string            `json:"identity"`
	Namespace  string            `json:"namespace"`
	Leading    bool              `json:"leading"`
	Gained     int64             `json:"gained"`
	Lost       int64             `json:"lost"`
	Reconciles int64             `json:"reconciles"`
	LockWrites int64             `json:"lockWrites"`
	Writes     map[string]int64  `json:"writes"`
	ReadErrors map[string]int64  `json:"readErrors,omitempty"`
	Exit       *kccmanager.Exit  `json:"exit,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

func runManager(ctx context.Context, args []string, log logr.Logger) error {
	fl := flag.NewFlagSet("kcc manager", flag.ContinueOnError)
	identity := fl.String("identity", "", "the cluster's candidate identity, shared by every manager of the cluster (required)")
	namespace := fl.String("namespace", "", "the namespace this manager reconciles (required)")
	leaseName := fl.String("lease-name", "", "the MultiClusterLease's name, in the Pod's namespace (required)")
	listen := fl.String("listen", ":8080", "where GET /status answers")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *identity == "" || *namespace == "" || *leaseName == "" {
		return errors.New("--identity, --namespace and --lease-name are required")
	}
	system, err := podNamespace()
	if err != nil {
		return err
	}
	base, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	m, err := kccmanager.Start(kccmanager.Config{
		Identity: *identity, Namespace: *namespace, SystemNamespace: system, LeaseName: *leaseName,
		Base: base, OwnIdentity: true, Log: log,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		s := m.Stats()
		st := managerStatus{Identity: *identity, Namespace: *namespace, Leading: m.Leading(), Gained: s.Gained, Lost: s.Lost,
			Reconciles: s.Reconciles, LockWrites: s.LockWrites, Writes: map[string]int64{}, ReadErrors: s.ReadErrors, Exit: s.Exit}
		for code, n := range s.Writes {
			st.Writes[strconv.Itoa(code)] = n
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		// SIGTERM: the Pod is deleted. Config Connector's manager does not
		// release the lock (ReleaseOnCancel false): stop as a crash does.
		m.Kill()
		return nil
	case <-m.Done():
		// The manager exited on its own (lost leadership, or a status
		// naming another cluster): the process ends, as Config
		// Connector's does, and the kubelet restarts it.
		exit := m.Exited()
		reason := "stopped"
		if exit != nil {
			reason = exit.Reason
		}
		return errors.New("manager exited: " + reason)
	}
}

func runController(ctx context.Context, args []string, log logr.Logger) error {
	fl := flag.NewFlagSet("kcc controller", flag.ContinueOnError)
	endpoint := fl.String("gcs-endpoint", "", "the GCS emulator's base URL, http://host:port (required)")
	bucket := fl.String("bucket", "", "the bucket of the global locks (required)")
	namespaces := fl.String("namespaces", "", "comma-separated namespaces whose MultiClusterLeases it reconciles (required)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *bucket == "" || *namespaces == "" {
		return errors.New("--gcs-endpoint, --bucket and --namespaces are required")
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	gcs, err := storage.NewClient(ctx, option.WithEndpoint(strings.TrimSuffix(*endpoint, "/")+"/storage/v1/"),
		option.WithoutAuthentication(), storage.WithJSONReads())
	if err != nil {
		return err
	}
	defer gcs.Close()
	c, err := mclcontroller.New(mclcontroller.Options{Config: config, Storage: gcs, Bucket: *bucket, Name: "multiclusterlease",
		Namespaces: strings.Split(*namespaces, ","), Log: log})
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

func runEmulator(ctx context.Context, args []string, log logr.Logger) error {
	fl := flag.NewFlagSet("kcc gcs-emulator", flag.ContinueOnError)
	listen := fl.String("listen", "0.0.0.0:4443", "host:port to serve the GCS JSON API on (plain HTTP)")
	bucket := fl.String("bucket", "", "the bucket to create (required)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *bucket == "" {
		return errors.New("--bucket is required")
	}
	host, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return fmt.Errorf("--listen: port %q: %w", portText, err)
	}
	srv, err := gcsemulator.Listen(*bucket, host, uint16(port), nil)
	if err != nil {
		return err
	}
	log.Info("serving the GCS JSON API", "url", srv.URL(), "bucket", *bucket)
	<-ctx.Done()
	srv.Stop()
	return nil
}
