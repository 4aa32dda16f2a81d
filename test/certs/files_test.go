package certs

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// Rotating the key pair on disk while lease writes go through the API server
// continuously: no write fails to reach leaseguard, the new certificate is
// served afterwards, and a broken rotation keeps the last good one serving.
func TestFileRotationUnderLoad(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca := newCA(t)
	certDir := t.TempDir()
	ca.issue(t, certDir, 100)

	policyPath := writePolicy(t)
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath, WebhookCAData: ca.pem, WebhookCertDir: certDir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, admin, "certs-guarded")
	guard, err := cp.StartLeaseguard(binary, policyPath, "--cert-mode", "files", "--cert-dir", certDir)
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Stop()
	addr := net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort))
	warm := 0
	eventually(t, 20*time.Second, "the webhook to answer", func() error {
		warm++
		return intruderWrite(ctx, cp.Config, fmt.Sprintf("warmup-%d", warm))
	})

	// Writers: every write must be refused by leaseguard, i.e. reach it.
	var sent, failed atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Bounded in count and time; paced so both writers span all
			// the rotations below.
			for i := 0; loadCtx.Err() == nil && i < 5000; i++ {
				time.Sleep(10 * time.Millisecond)
				err := intruderWrite(loadCtx, cp.Config, fmt.Sprintf("load-%d-%d", w, i))
				if loadCtx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				}
			}
		}(w)
	}

	for serial := int64(101); serial <= 103; serial++ {
		ca.issue(t, certDir, serial)
		eventually(t, 30*time.Second, fmt.Sprintf("serial %d to be served", serial), func() error {
			c, err := servedCertificate(addr)
			if err != nil {
				return err
			}
			if c.SerialNumber.Int64() != serial {
				return fmt.Errorf("serving serial %d", c.SerialNumber.Int64())
			}
			return nil
		})
	}

	// A rotation that goes wrong: garbage in the key file. The last good
	// certificate keeps serving and writes keep reaching leaseguard.
	writeAtomically(t, filepath.Join(certDir, "tls.key"), []byte("not a key"))
	time.Sleep(12 * time.Second) // past controller-runtime's 10s re-read poll
	c, err := servedCertificate(addr)
	if err != nil {
		t.Fatalf("after a broken rotation the webhook stopped serving TLS: %v", err)
	}
	if c.SerialNumber.Int64() != 103 {
		t.Fatalf("after a broken rotation serving serial %d, want the last good 103", c.SerialNumber.Int64())
	}

	stopLoad()
	wg.Wait()
	if sent.Load() < 20 {
		t.Fatalf("only %d writes sent during the rotations", sent.Load())
	}
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of %d writes did not reach leaseguard during rotations; first: %v", n, sent.Load(), firstFailure.Load())
	}
	t.Logf("%d writes, all refused by leaseguard, across 3 rotations and a broken one", sent.Load())
	_ = os.Remove(filepath.Join(certDir, "tls.key"))
}
