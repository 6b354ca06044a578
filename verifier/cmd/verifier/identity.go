package main

import (
	"context"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// serviceAccountPrefix starts the username of every ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// serviceAccount is the ServiceAccount the verifier acts as, which it binds to its role in each
// sandbox: flagValue ("<namespace>/<name>") when set, else the user the API server authenticates
// it as (a SelfSubjectReview, which every authenticated user may create), so that a verifier
// deployed under another name or namespace, or impersonating one, binds the right subject.
func serviceAccount(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, flagValue string) (types.NamespacedName, error) {
	if flagValue != "" {
		ns, name, ok := strings.Cut(flagValue, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return types.NamespacedName{}, fmt.Errorf("--service-account=%q: want <namespace>/<name>", flagValue)
		}
		return types.NamespacedName{Namespace: ns, Name: name}, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return types.NamespacedName{}, err
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return types.NamespacedName{}, fmt.Errorf("asking the API server who the verifier is (SelfSubjectReview): %w; or set --service-account", err)
	}
	user := review.Status.UserInfo.Username
	ns, name, ok := strings.Cut(strings.TrimPrefix(user, serviceAccountPrefix), ":")
	if !strings.HasPrefix(user, serviceAccountPrefix) || !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("the verifier runs as %q, not as a ServiceAccount; set --service-account to the one deploy/verifier binds (ugallu-system/coffer-verifier)", user)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
