package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

var _ = Describe("the deployable package", func() {
	DescribeTable("renders and the API server accepts every object (server-side dry-run)", func(overlay string, want ...string) {
		root, err := controlplane.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		rendered, err := exec.Command(env.kubectl, "kustomize", filepath.Join(root, overlay)).Output()
		Expect(err).NotTo(HaveOccurred(), "kubectl kustomize "+overlay)

		if env.local {
			By("installing cert-manager's CRDs " + controlplane.CertManagerVersion)
			files, err := controlplane.CertManagerCRDs()
			Expect(err).NotTo(HaveOccurred())
			for _, f := range files {
				out, err := kubectl("apply", "--server-side", "-f", f)
				Expect(err).NotTo(HaveOccurred(), out)
			}
			Eventually(func() error {
				_, err := kubectl("get", "certificates.cert-manager.io", "-A")
				return err
			}).Should(Succeed())
		}

		// A dry-run creates no namespace, so the objects in it need a real one.
		if _, err := kubectl("get", "namespace", "leaseguard-system"); err != nil {
			out, err := kubectl("create", "namespace", "leaseguard-system")
			Expect(err).NotTo(HaveOccurred(), out)
		}
		// Each object on its own: created when new, replaced when it exists
		// (on the local control plane the webhook configurations and the CRD
		// are already installed, pointing at the local server), all dry-run.
		var kinds []string
		accepted := 0
		for i, doc := range bytes.Split(rendered, []byte("\n---\n")) {
			kind := ""
			for _, line := range strings.Split(string(doc), "\n") {
				if strings.HasPrefix(line, "kind: ") {
					kind = strings.TrimPrefix(line, "kind: ")
				}
			}
			if kind == "" {
				continue
			}
			kinds = append(kinds, kind)
			f := filepath.Join(env.tmp, fmt.Sprintf("install-%02d.yaml", i))
			Expect(os.WriteFile(f, doc, 0o600)).To(Succeed())
			out, err := kubectl("create", "--dry-run=server", "-f", f)
			if err != nil && strings.Contains(out, "AlreadyExists") {
				out, err = kubectl("replace", "--dry-run=server", "-f", f)
			}
			Expect(err).NotTo(HaveOccurred(), "%s rejected:\n%s", kind, out)
			Expect(out).To(ContainSubstring("(server dry run)"))
			accepted++
		}
		Expect(kinds).To(ContainElements(want))
		Expect(accepted).To(Equal(len(kinds)))
	},
		// No CustomResourceDefinition in the user-facing installs (test/chart
		// checks there is none); the e2e overlays add the MultiClusterLease
		// CRD with config/components/multiclusterlease-crd.
		Entry("config/default (cert-manager)", "config/default", "Namespace", "ServiceAccount", "ConfigMap", "Service",
			"Deployment", "PodDisruptionBudget", "Issuer", "Certificate", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
		Entry("config/self-managed", "config/self-managed", "Namespace", "ServiceAccount", "ConfigMap", "Service", "Deployment",
			"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
		Entry("config/e2e (cert-manager, the e2e policy)", "config/e2e", "ConfigMap", "Certificate", "CustomResourceDefinition", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
		Entry("config/e2e-self-managed (the e2e policy)", "config/e2e-self-managed", "ConfigMap", "Role", "CustomResourceDefinition", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
	)

	// An overlay that swaps the policy must swap the webhook configurations
	// too, or leaseguard is never called for what its policy selects (or is
	// called for what it does not): config/e2e-policy patches them with what
	// `leaseguard manifests --kustomize-patch` renders for its policy.
	DescribeTable("installs the webhook configurations its policy renders", func(overlay, policyFile string) {
		root, err := controlplane.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		built, err := exec.Command(env.kubectl, "kustomize", filepath.Join(root, overlay)).Output()
		Expect(err).NotTo(HaveOccurred(), "kubectl kustomize "+overlay)
		p, _, err := policyfile.Load(filepath.Join(root, policyFile), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
		Expect(err).NotTo(HaveOccurred())
		want, err := manifests.Render(p, manifests.Defaults())
		Expect(err).NotTo(HaveOccurred())

		var got manifests.Rendered
		for _, doc := range bytes.Split(built, []byte("\n---\n")) {
			var meta metav1.TypeMeta
			Expect(yaml.Unmarshal(doc, &meta)).To(Succeed())
			switch meta.Kind {
			case "ValidatingWebhookConfiguration":
				got.Validating = &admissionregistrationv1.ValidatingWebhookConfiguration{}
				Expect(yaml.UnmarshalStrict(doc, got.Validating)).To(Succeed())
			case "MutatingWebhookConfiguration":
				got.Mutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
				Expect(yaml.UnmarshalStrict(doc, got.Mutating)).To(Succeed())
			case "MutatingAdmissionPolicy":
				got.Coalescing = &admissionregistrationv1.MutatingAdmissionPolicy{}
				Expect(yaml.UnmarshalStrict(doc, got.Coalescing)).To(Succeed())
			}
		}
		// What the base decides stays: the Service and its namespace, the
		// CA; only the path comes from the rendering.
		service := func(c admissionregistrationv1.WebhookClientConfig) string {
			Expect(c.Service).NotTo(BeNil())
			Expect(c.Service.Name).To(Equal("leaseguard-webhook-service"))
			Expect(c.Service.Namespace).To(Equal("leaseguard-system"))
			return *c.Service.Path
		}
		Expect(got.Validating).NotTo(BeNil())
		Expect(got.Validating.Webhooks).To(HaveLen(len(want.Validating.Webhooks)))
		for i, w := range want.Validating.Webhooks {
			g := got.Validating.Webhooks[i]
			Expect(service(g.ClientConfig)).To(Equal(*w.ClientConfig.Service.Path))
			g.ClientConfig, w.ClientConfig = admissionregistrationv1.WebhookClientConfig{}, admissionregistrationv1.WebhookClientConfig{}
			Expect(g).To(Equal(w), "webhook %s", w.Name)
		}
		Expect(got.Mutating == nil).To(Equal(want.Mutating == nil), "a MutatingWebhookConfiguration when the policy needs one")
		if want.Mutating != nil {
			Expect(got.Mutating.Webhooks).To(HaveLen(len(want.Mutating.Webhooks)))
			for i, w := range want.Mutating.Webhooks {
				g := got.Mutating.Webhooks[i]
				Expect(service(g.ClientConfig)).To(Equal(*w.ClientConfig.Service.Path))
				g.ClientConfig, w.ClientConfig = admissionregistrationv1.WebhookClientConfig{}, admissionregistrationv1.WebhookClientConfig{}
				Expect(g).To(Equal(w), "webhook %s", w.Name)
			}
		}
		Expect(got.Coalescing == nil).To(Equal(want.Coalescing == nil), "a coalescing policy when the policy coalesces")
		if want.Coalescing != nil {
			Expect(got.Coalescing.Spec).To(Equal(want.Coalescing.Spec))
		}
	},
		Entry("config/default", "config/default", "config/manager/policy.yaml"),
		Entry("config/self-managed", "config/self-managed", "config/manager/policy.yaml"),
		Entry("config/e2e", "config/e2e", "config/e2e-policy/policy.yaml"),
		Entry("config/e2e-self-managed", "config/e2e-self-managed", "config/e2e-policy/policy.yaml"),
	)

	It("runs its Deployment under the restricted security settings", func() {
		root, err := controlplane.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		rendered, err := exec.Command(env.kubectl, "kustomize", filepath.Join(root, "config", "default")).Output()
		Expect(err).NotTo(HaveOccurred())
		text := string(rendered)
		for _, want := range []string{"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
			"- ALL", "type: RuntimeDefault", "replicas: 2", "podAntiAffinity", "kind: PodDisruptionBudget",
			"cert-manager.io/inject-ca-from: leaseguard-system/leaseguard-serving-cert", "- --manage-webhook-configurations"} {
			Expect(text).To(ContainSubstring(want))
		}
	})
})
