package localcluster

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// ownedChainPrefixes name the iptables chains of the cluster: KUBE-* are
// kube-proxy's and the kubelet's, CNI-* the CNI plugins'.
var ownedChainPrefixes = []string{"KUBE-", "CNI-"}

func ownedChain(name string) bool {
	for _, p := range ownedChainPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// removeOwnedChains deletes, in every table of IPv4 and IPv6, each rule of
// another chain that jumps to an owned chain, then flushes and deletes the
// owned chains, one iptables-restore --noflush per table so a table is
// never left half-cleaned.
func removeOwnedChains() error {
	for _, family := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(family); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			rules, err := exec.Command(family, "-w", "5", "-t", table, "-S").Output()
			if err != nil {
				continue // table not in this kernel
			}
			script := cleanupScript(table, string(rules))
			if script == "" {
				continue
			}
			cmd := exec.Command(family+"-restore", "-w", "5", "--noflush")
			cmd.Stdin = strings.NewReader(script)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s-restore (table %s): %v: %s\n%s", family, table, err, stderr.String(), script)
			}
		}
	}
	return nil
}

// cleanupScript turns `iptables -S` output into the iptables-restore input
// that removes the owned chains and every jump to them; "" when there are
// none.
func cleanupScript(table, rules string) string {
	var deletes, chains []string
	for _, line := range strings.Split(rules, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "-N" && ownedChain(f[1]):
			chains = append(chains, f[1])
		case len(f) >= 2 && f[0] == "-A" && !ownedChain(f[1]) && jumpsToOwned(f):
			deletes = append(deletes, "-D"+strings.TrimPrefix(line, "-A"))
		}
	}
	if len(deletes) == 0 && len(chains) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*" + table + "\n")
	for _, d := range deletes {
		b.WriteString(d + "\n")
	}
	for _, c := range chains {
		b.WriteString("-F " + c + "\n")
	}
	for _, c := range chains {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func jumpsToOwned(fields []string) bool {
	for i := 0; i+1 < len(fields); i++ {
		if (fields[i] == "-j" || fields[i] == "-g") && ownedChain(fields[i+1]) {
			return true
		}
	}
	return false
}

// ownedChainsLeft lists the owned chains still present, for the check
// after teardown.
func ownedChainsLeft() []string {
	var left []string
	for _, family := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(family); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			rules, err := exec.Command(family, "-w", "5", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(rules), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && ownedChain(f[1]) {
					left = append(left, family+" "+table+" "+f[1])
				}
			}
		}
	}
	return left
}
