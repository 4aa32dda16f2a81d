package config

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Webhooks returns the webhook configurations of config/webhook.
func Webhooks() ([]*admissionregistrationv1.MutatingWebhookConfiguration, []*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	docs, err := documents(WebhooksPath)
	if err != nil {
		return nil, nil, err
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range docs {
		var head struct{ Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", WebhooksPath, err)
		}
		switch head.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, m); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", WebhooksPath, err)
			}
			mutating = append(mutating, m)
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", WebhooksPath, err)
			}
			validating = append(validating, v)
		case "":
			// A document of comments only (the generated file's header).
		case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			// The coalescing and renewals policies: installed by whoever
			// installs the file.
		default:
			return nil, nil, fmt.Errorf("%s: unexpected kind %q", WebhooksPath, head.Kind)
		}
	}
	return mutating, validating, nil
}

// CRDs returns the CustomResourceDefinitions of config/crd.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	docs, err := documents(CRDPath)
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, doc := range docs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", CRDPath, err)
		}
		out = append(out, crd)
	}
	return out, nil
}

func documents(path string) ([][]byte, error) {
	data, err := Files.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufioReader(data))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		docs = append(docs, doc)
	}
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }
