package manifests

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// patchDoc is one strategic-merge patch, as YAML maps.
type patchDoc = map[string]any

// KustomizePatch renders the configuration as strategic-merge patches for a
// kustomize overlay of config/default that replaces the policy ConfigMap:
// the overlay's webhook configurations must then select what its policy's
// rules select, not what config/manager/policy.yaml's do (config/e2e-policy
// is one such overlay).
//
// Each patch keeps what the base's build decided and the policy does not:
// the Service's name and namespace, the CA bundle and the annotations that
// inject it. Everything the policy decides is replaced whole (rules,
// namespaceSelector, matchConditions, failurePolicy, timeouts), webhooks the
// policy does not need are deleted, and so is the coalescing policy when no
// rule coalesces. The base must have every object and webhook the patch
// keeps: config/default renders all of them.
func (r *Rendered) KustomizePatch(header string) ([]byte, error) {
	var docs []patchDoc
	prefix := strings.TrimSuffix(r.Validating.Name, "-validating-webhook-configuration")
	// The admission policies: each replaced, or deleted where not rendered.
	for _, pol := range []struct {
		kind, name string
		objs       []any
	}{
		{"MutatingAdmissionPolicy", prefix + "-coalesce-renewals", []any{r.Coalescing, r.CoalescingBinding}},
		{"ValidatingAdmissionPolicy", prefix + "-renewals", []any{r.Renewals, r.RenewalsBinding}},
	} {
		if reflect.ValueOf(pol.objs[0]).IsNil() {
			docs = append(docs, deletePatch(pol.kind, pol.name), deletePatch(pol.kind+"Binding", pol.name))
			continue
		}
		for _, obj := range pol.objs {
			m, err := toPatchDoc(obj)
			if err != nil {
				return nil, err
			}
			delete(m["metadata"].(patchDoc), "labels")
			m["spec"].(patchDoc)["$patch"] = "replace"
			docs = append(docs, m)
		}
	}
	v, err := webhooksPatch(r.Validating, "ValidatingWebhookConfiguration", r.Validating.Name, []string{ValidateWebhook, RenewalsWebhook})
	if err != nil {
		return nil, err
	}
	docs = append(docs, v)
	mutatingName := prefix + "-mutating-webhook-configuration"
	if r.Mutating != nil {
		m, err := webhooksPatch(r.Mutating, "MutatingWebhookConfiguration", mutatingName, []string{DesignateWebhook})
		if err != nil {
			return nil, err
		}
		docs = append(docs, m)
	} else {
		docs = append(docs, deletePatch("MutatingWebhookConfiguration", mutatingName))
	}

	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + line + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("# NOTE: " + n + "\n")
	}
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes(), nil
}

func toPatchDoc(obj any) (patchDoc, error) {
	data, err := yaml.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("rendering %T: %w", obj, err)
	}
	var m patchDoc
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func patchRef(kind, name string) patchDoc {
	return patchDoc{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": patchDoc{"name": name}}
}

func deletePatch(kind, name string) patchDoc {
	d := patchRef(kind, name)
	d["$patch"] = "delete"
	return d
}

// webhooksPatch turns a configuration into a patch of its webhooks, keyed
// by name, clientConfig reduced to the path. kustomize replaces the lists
// of a webhook (rules, matchConditions) whole; the selectors are maps,
// which it would merge, so they say so. The known webhooks this policy
// does not need are deleted.
func webhooksPatch(cfg any, kind, name string, known []string) (patchDoc, error) {
	m, err := toPatchDoc(cfg)
	if err != nil {
		return nil, err
	}
	out := patchRef(kind, name)
	if meta, ok := m["metadata"].(patchDoc); ok && meta["annotations"] != nil {
		// How it was rendered (RenderedWith), for configsync.
		out["metadata"].(patchDoc)["annotations"] = meta["annotations"]
	}
	var list []any
	present := map[string]bool{}
	hooks, _ := m["webhooks"].([]any)
	for _, h := range hooks {
		w := h.(patchDoc)
		present[w["name"].(string)] = true
		if cc, ok := w["clientConfig"].(patchDoc); ok {
			if svc, ok := cc["service"].(patchDoc); ok {
				w["clientConfig"] = patchDoc{"service": patchDoc{"path": svc["path"]}}
			} else {
				w["clientConfig"] = patchDoc{"url": cc["url"]}
			}
		}
		for _, field := range []string{"namespaceSelector", "objectSelector"} {
			if s, ok := w[field].(patchDoc); ok {
				s["$patch"] = "replace"
			}
		}
		list = append(list, w)
	}
	for _, n := range known {
		if !present[n] {
			list = append(list, patchDoc{"name": n, "$patch": "delete"})
		}
	}
	out["webhooks"] = list
	return out, nil
}
