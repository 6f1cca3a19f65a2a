package deploy

import (
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/soapgw/soapgw/internal/config"
)

const (
	k8sDir        = "kubernetes"
	monitoringDir = "kubernetes/monitoring"
)

// externalSecrets are the Secrets the manifests mount that the base does not contain:
// they hold keys, which are never committed, so an operator creates them out of band, as
// kubernetes/README.md shows (and the test checks it does).
var externalSecrets = map[string]bool{
	"soapgw-tunnel-key": true, // the shared tunnel key: tunnel.key from `soapgw keygen`
}

// kustomization is the part of kustomize's Kustomization these manifests use; decoding
// is strict, so a field outside it fails the test rather than being ignored.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
		IncludeTemplates bool              `json:"includeTemplates"`
	} `json:"labels"`
	Resources          []string `json:"resources"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// (monitoring.coreos.com/v1) used in monitoring/.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// decodeStrict decodes YAML into v through JSON, failing on unknown and duplicate
// fields, as `kubectl apply --validate=strict` does.
func decodeStrict(data []byte, v any) error { return sigyaml.UnmarshalStrict(data, v) }

// k8sObjects are decoded manifests by kind and name.
type k8sObjects struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	pdbs        map[string]*policyv1.PodDisruptionBudget
	monitors    map[string]*serviceMonitor
}

func newK8sObjects() *k8sObjects {
	return &k8sObjects{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		monitors:    map[string]*serviceMonitor{},
	}
}

func put[T any, PT interface {
	*T
	metav1.Object
}](m map[string]PT, src string, doc []byte) error {
	var v T
	if err := decodeStrict(doc, &v); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	p := PT(&v)
	name := p.GetName()
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s: name %q: %s", src, name, strings.Join(errs, "; "))
	}
	if _, dup := m[name]; dup {
		return fmt.Errorf("%s: a second object named %q", src, name)
	}
	for k, v := range p.GetLabels() {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return fmt.Errorf("%s: label %s=%s: %s", src, k, v, strings.Join(errs, "; "))
		}
	}
	m[name] = p
	return nil
}

// add decodes one manifest strictly into its typed API struct.
func (o *k8sObjects) add(src string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := sigyaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		return put(o.deployments, src, doc)
	case "v1 Service":
		return put(o.services, src, doc)
	case "v1 ConfigMap":
		return put(o.configMaps, src, doc)
	case "v1 Secret":
		return put(o.secrets, src, doc)
	case "policy/v1 PodDisruptionBudget":
		return put(o.pdbs, src, doc)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return put(o.monitors, src, doc)
	}
	return fmt.Errorf("%s: unexpected apiVersion %q kind %q (add it to the test)", src, tm.APIVersion, tm.Kind)
}

// addDocs adds every document of a (possibly multi-document) YAML stream.
func (o *k8sObjects) addDocs(t *testing.T, src string, data []byte) {
	t.Helper()
	docs := regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1)
	n := 0
	for i, d := range docs {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) == "" {
			continue
		}
		n++
		require.NoError(t, o.add(fmt.Sprintf("%s[%d]", src, i), []byte(d)))
	}
	require.NotZero(t, n, "%s: no manifest", src)
}

func loadKustomization(t *testing.T, dir string) *kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	k := &kustomization{}
	require.NoError(t, decodeStrict(data, k), "%s/kustomization.yaml", dir)
	require.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion)
	require.Equal(t, "Kustomization", k.Kind)
	return k
}

// applyLabels does what kustomize's labels field does to one object.
func (k *kustomization) applyLabels(meta *metav1.ObjectMeta, template *metav1.ObjectMeta) {
	for _, l := range k.Labels {
		for key, v := range l.Pairs {
			if meta.Labels == nil {
				meta.Labels = map[string]string{}
			}
			meta.Labels[key] = v
			if template != nil && l.IncludeTemplates {
				if template.Labels == nil {
					template.Labels = map[string]string{}
				}
				template.Labels[key] = v
			}
		}
	}
}

// loadBase decodes the kustomize base the way kustomize would assemble it (without the
// hash suffixes), and returns the files it uses.
func loadBase(t *testing.T, dir string) (*k8sObjects, *kustomization, []string) {
	t.Helper()
	k := loadKustomization(t, dir)
	objs := newK8sObjects()
	used := []string{"kustomization.yaml"}
	for _, r := range k.Resources {
		require.False(t, strings.Contains(r, ".."), "%s: resource %s outside the directory", dir, r)
		data, err := os.ReadFile(filepath.Join(dir, r))
		require.NoError(t, err, "%s: resource", dir)
		objs.addDocs(t, filepath.Join(dir, r), data)
		used = append(used, r)
	}
	for _, g := range k.ConfigMapGenerator {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.Name}, Data: map[string]string{}}
		for _, f := range g.Files {
			key, file, ok := strings.Cut(f, "=")
			if !ok {
				key, file = path.Base(f), f
			}
			require.Empty(t, validation.IsConfigMapKey(key), "%s: configMapGenerator %s key %q", dir, g.Name, key)
			data, err := os.ReadFile(filepath.Join(dir, file))
			require.NoError(t, err, "%s: configMapGenerator %s", dir, g.Name)
			cm.Data[key] = string(data)
			used = append(used, file)
		}
		require.NotContains(t, objs.configMaps, g.Name)
		objs.configMaps[g.Name] = cm
	}
	for _, d := range objs.deployments {
		k.applyLabels(&d.ObjectMeta, &d.Spec.Template.ObjectMeta)
	}
	for _, s := range objs.services {
		k.applyLabels(&s.ObjectMeta, nil)
	}
	for _, c := range objs.configMaps {
		k.applyLabels(&c.ObjectMeta, nil)
	}
	for _, s := range objs.secrets {
		k.applyLabels(&s.ObjectMeta, nil)
	}
	for _, p := range objs.pdbs {
		k.applyLabels(&p.ObjectMeta, nil)
	}
	for _, m := range objs.monitors {
		k.applyLabels(&m.ObjectMeta, nil)
	}
	return objs, k, used
}

// TestKubernetesManifests decodes the kustomize base and the monitoring directory
// strictly and checks them against each other and against the soapgw configurations.
func TestKubernetesManifests(t *testing.T) {
	base, k, used := loadBase(t, k8sDir)
	require.Len(t, k.Images, 1)
	checkObjects(t, base, k.Images[0].Name)

	mon, _, monUsed := loadBase(t, monitoringDir)
	checkMonitoring(t, base, mon)

	// Every file of the directory is used: no stray manifest that nothing applies.
	var files []string
	require.NoError(t, filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, filepath.ToSlash(p))
		}
		return err
	}))
	var want []string
	for _, u := range used {
		want = append(want, path.Join(k8sDir, u))
	}
	for _, u := range monUsed {
		want = append(want, path.Join(monitoringDir, u))
	}
	want = append(want, path.Join(k8sDir, "README.md"))
	require.ElementsMatch(t, want, files, "files under deploy/kubernetes must all be resources, generator inputs or the README")
}

// TestKubernetesRendered renders the base and monitoring/ with kustomize (its Go API, the
// engine of `kubectl kustomize`, so the test needs no kubectl) and checks the output the
// same way: this covers what kustomize itself does (generated names with hashes,
// references to them, images, labels).
func TestKubernetesRendered(t *testing.T) {
	render := func(dir string) []byte {
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		m, err := k.Run(filesys.MakeFsOnDisk(), dir)
		require.NoError(t, err, "kustomize build %s", dir)
		out, err := m.AsYaml()
		require.NoError(t, err, "kustomize build %s", dir)
		return out
	}
	k := loadKustomization(t, k8sDir)
	objs := newK8sObjects()
	objs.addDocs(t, "kubectl kustomize "+k8sDir, render(k8sDir))
	img := k.Images[0].Name
	if k.Images[0].NewName != "" {
		img = k.Images[0].NewName
	}
	checkObjects(t, objs, img+":"+k.Images[0].NewTag)
	for _, g := range k.ConfigMapGenerator {
		n := 0
		for name := range objs.configMaps {
			if regexp.MustCompile(`^` + regexp.QuoteMeta(g.Name) + `-[a-z0-9]{10}$`).MatchString(name) {
				n++
			}
		}
		require.Equal(t, 1, n, "generated ConfigMap %s-<hash>", g.Name)
	}
	mon := newK8sObjects()
	mon.addDocs(t, "kubectl kustomize "+monitoringDir, render(monitoringDir))
	checkMonitoring(t, objs, mon)
}

// gatewayInfo is a soapgw gateway container and its configuration.
type gatewayInfo struct {
	pod       string
	container *corev1.Container
	sidecar   bool
	cfg       *config.Config
}

// allContainers returns the init and regular containers of a pod, marking native
// sidecars.
func allContainers(spec *corev1.PodSpec) (cs []*corev1.Container, sidecar map[string]bool) {
	sidecar = map[string]bool{}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		cs = append(cs, c)
		sidecar[c.Name] = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	}
	for i := range spec.Containers {
		cs = append(cs, &spec.Containers[i])
	}
	return cs, sidecar
}

// findPort resolves a probe's or Service's port in a container: by name or number.
func findPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func checkProbePort(t *testing.T, where string, c *corev1.Container, p *corev1.Probe) {
	t.Helper()
	if p == nil {
		return
	}
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
		require.True(t, strings.HasPrefix(p.HTTPGet.Path, "/"), "%s: probe path", where)
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	default:
		t.Fatalf("%s: probe without httpGet or tcpSocket (the image has no shell for exec probes)", where)
	}
	_, ok := findPort(c, port)
	require.True(t, ok, "%s: probe port %s is not a port of the container", where, port.String())
}

// checkObjects checks one assembled set of manifests (the base as files, or as
// rendered by kustomize); image is the image every container must use.
func checkObjects(t *testing.T, o *k8sObjects, image string) {
	t.Helper()
	require.NotEmpty(t, o.deployments)
	usedConfigMaps, usedSecrets := map[string]bool{}, map[string]bool{}
	gateways := map[string][]gatewayInfo{} // by Deployment

	for name, d := range o.deployments {
		where := "Deployment " + name
		tmpl := &d.Spec.Template
		require.NotNil(t, d.Spec.Selector, where)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		require.NoError(t, err, where)
		require.False(t, sel.Empty(), "%s: empty selector", where)
		require.True(t, sel.Matches(labels.Set(tmpl.Labels)), "%s: selector %s does not match the pod template labels %v", where, sel, tmpl.Labels)
		for other, d2 := range o.deployments {
			if other != name {
				require.False(t, sel.Matches(labels.Set(d2.Spec.Template.Labels)), "%s: selector also matches the pods of %s", where, other)
			}
		}
		require.NotNil(t, d.Spec.Replicas, "%s: replicas", where)

		spec := &tmpl.Spec
		sc := spec.SecurityContext
		require.NotNil(t, sc, "%s: pod securityContext", where)
		require.True(t, sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "%s: runAsNonRoot", where)
		require.True(t, sc.RunAsUser != nil && *sc.RunAsUser != 0, "%s: runAsUser", where)
		require.True(t, sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "%s: seccomp RuntimeDefault", where)
		require.True(t, spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken, "%s: the gateways need no service account token", where)
		require.NotNil(t, spec.TerminationGracePeriodSeconds, "%s: terminationGracePeriodSeconds", where)

		volumes := map[string]*corev1.Volume{}
		for i := range spec.Volumes {
			v := &spec.Volumes[i]
			require.NotContains(t, volumes, v.Name, "%s: duplicate volume", where)
			volumes[v.Name] = v
			switch {
			case v.ConfigMap != nil:
				cm, ok := o.configMaps[v.ConfigMap.Name]
				require.True(t, ok, "%s: volume %s: no ConfigMap %q", where, v.Name, v.ConfigMap.Name)
				for _, it := range v.ConfigMap.Items {
					require.Contains(t, cm.Data, it.Key, "%s: volume %s", where, v.Name)
				}
				usedConfigMaps[v.ConfigMap.Name] = true
			case v.Secret != nil && externalSecrets[v.Secret.SecretName]:
				require.NotContains(t, o.secrets, v.Secret.SecretName, "%s: volume %s: Secret %s is created out of band: the base must not hold it", where, v.Name, v.Secret.SecretName)
				require.True(t, v.Secret.Optional != nil && !*v.Secret.Optional,
					"%s: volume %s: optional: false, so that a pod without the key waits and says why", where, v.Name)
				usedSecrets[v.Secret.SecretName] = true
			case v.Secret != nil:
				require.Contains(t, o.secrets, v.Secret.SecretName, "%s: volume %s: no Secret", where, v.Name)
				usedSecrets[v.Secret.SecretName] = true
			default:
				t.Fatalf("%s: volume %s: only ConfigMap and Secret volumes are expected", where, v.Name)
			}
		}
		mountedVolumes := map[string]bool{}

		containers, sidecar := allContainers(spec)
		names := map[string]bool{}
		for _, c := range containers {
			names[c.Name] = true
		}
		for i, c := range spec.InitContainers {
			require.True(t, sidecar[c.Name], "%s: init container %d (%s) is not a native sidecar", where, i, c.Name)
		}
		var loadURLs []string
		for _, c := range containers {
			cw := where + " container " + c.Name
			require.Empty(t, validation.IsDNS1123Label(c.Name), cw)
			require.Equal(t, image, c.Image, "%s: image", cw)
			require.NotEmpty(t, c.Args, "%s: args (the image's entrypoint is soapgw)", cw)
			require.Empty(t, c.Command, "%s: command would replace the image's entrypoint", cw)

			// Security and resources.
			csc := c.SecurityContext
			require.NotNil(t, csc, "%s: securityContext", cw)
			require.True(t, csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", cw)
			require.True(t, csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation false", cw)
			require.True(t, csc.Capabilities != nil && slices.Contains(csc.Capabilities.Drop, "ALL") && len(csc.Capabilities.Add) == 0, "%s: drop ALL capabilities", cw)
			require.True(t, csc.Privileged == nil || !*csc.Privileged, cw)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := c.Resources.Requests[r]
				lim, okLim := c.Resources.Limits[r]
				require.True(t, okReq && okLim, "%s: %s request and limit", cw, r)
				require.True(t, req.Cmp(lim) <= 0, "%s: %s request above its limit", cw, r)
			}

			// Ports, probes, mounts, environment.
			portNames := map[string]bool{}
			for _, p := range c.Ports {
				require.Empty(t, validation.IsValidPortName(p.Name), "%s: port name %q", cw, p.Name)
				require.False(t, portNames[p.Name], "%s: duplicate port name", cw)
				portNames[p.Name] = true
				require.Equal(t, portProtocol(p.Name), p.Protocol, "%s: port %s: only tunnel-udp is UDP (README.md, UDP)", cw, p.Name)
			}
			for kind, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
				checkProbePort(t, cw+" "+kind+"Probe", c, p)
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				v, ok := volumes[m.Name]
				require.True(t, ok, "%s: mount of unknown volume %s", cw, m.Name)
				require.True(t, m.ReadOnly, "%s: mount %s must be read-only", cw, m.Name)
				if m.SubPath != "" && v.ConfigMap != nil {
					require.Contains(t, o.configMaps[v.ConfigMap.Name].Data, m.SubPath, "%s: subPath of mount %s", cw, m.Name)
				}
				mountedVolumes[m.Name] = true
				mounts[m.MountPath] = m
			}
			for _, e := range c.Env {
				require.Empty(t, validation.IsEnvVarName(e.Name), cw)
				if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
					ref := e.ValueFrom.ResourceFieldRef
					if ref.ContainerName != "" {
						require.True(t, names[ref.ContainerName], "%s: env %s refers to container %q", cw, e.Name, ref.ContainerName)
					}
				}
			}

			switch c.Args[0] {
			case "run":
				// A gateway: its configuration comes from a mounted ConfigMap key.
				cfgPath, ok := flagValue(c.Args, "config")
				require.True(t, ok, "%s: run --config", cw)
				m, ok := mounts[cfgPath]
				key := m.SubPath
				if !ok {
					m, ok = mounts[path.Dir(cfgPath)]
					key = path.Base(cfgPath)
				}
				require.True(t, ok, "%s: --config %s is not on a mounted volume", cw, cfgPath)
				v := volumes[m.Name]
				require.NotNil(t, v.ConfigMap, "%s: --config %s must come from a ConfigMap", cw, cfgPath)
				data, ok := o.configMaps[v.ConfigMap.Name].Data[key]
				require.True(t, ok, "%s: ConfigMap %s has no key %s", cw, v.ConfigMap.Name, key)
				cfg := parseConfig(t, fmt.Sprintf("ConfigMap %s key %s", v.ConfigMap.Name, key), data)
				requireAuthenticated(t, cw, cfg)
				checkCredentialMounts(t, cw, spec, c, volumes, data)
				gateways[name] = append(gateways[name], gatewayInfo{pod: name, container: c, sidecar: sidecar[c.Name], cfg: cfg})
			case "example-load":
				u, ok := flagValue(c.Args, "url")
				require.True(t, ok, "%s: --url", cw)
				loadURLs = append(loadURLs, u)
			case "example-server":
				l, ok := flagValue(c.Args, "listen")
				require.True(t, ok, "%s: --listen", cw)
				_, ok = findPort(c, intstr.FromInt32(int32(port(t, l))))
				require.True(t, ok, "%s: --listen %s is not a declared port", cw, l)
			default:
				t.Fatalf("%s: unexpected soapgw command %q", cw, c.Args[0])
			}
		}
		for v := range volumes {
			require.True(t, mountedVolumes[v], "%s: volume %s is mounted nowhere", where, v)
		}

		// The gateways of this pod against its containers, probes and annotations.
		gws := gateways[name]
		require.Len(t, gws, 1, "%s: one gateway per pod (sidecar pattern)", where)
		gw := gws[0]
		c, cfg := gw.container, gw.cfg
		cw := where + " container " + c.Name
		ports := listenPorts(t, cfg)
		admin, ok := findPort(c, intstr.FromString("admin"))
		require.True(t, ok, "%s: port named admin", cw)
		require.Equal(t, ports["admin"], int(admin.ContainerPort), "%s: port admin vs admin.listen %s", cw, cfg.Admin.Listen)
		require.Equal(t, "", mustHost(t, cfg.Admin.Listen), "%s: admin.listen must take the kubelet's probes on the pod IP", cw)
		require.NotNil(t, c.LivenessProbe, cw)
		require.NotNil(t, c.ReadinessProbe, cw)
		require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, cw)
		require.Equal(t, intstr.FromString("admin"), c.LivenessProbe.HTTPGet.Port, cw)
		require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, cw)
		require.Equal(t, intstr.FromString("admin"), c.ReadinessProbe.HTTPGet.Port, cw)
		if gw.sidecar {
			require.NotNil(t, c.StartupProbe, "%s: a native sidecar needs a startupProbe, or the app starts before it listens", cw)
		}
		ann := tmpl.Annotations
		require.Equal(t, "true", ann["prometheus.io/scrape"], where)
		require.Equal(t, fmt.Sprint(ports["admin"]), ann["prometheus.io/port"], where)
		require.Equal(t, "/metrics", ann["prometheus.io/path"], where)

		grace := *spec.TerminationGracePeriodSeconds
		gwStop := preStopSleep(c) + int64(cfg.DrainTimeout/time.Second)
		require.Less(t, gwStop, grace, "%s: preStop + drain_timeout must fit in terminationGracePeriodSeconds", cw)
		if cfg.Origin != nil {
			tunnel, ok := findPort(c, intstr.FromString("tunnel"))
			require.True(t, ok, "%s: port named tunnel", cw)
			require.Equal(t, ports["origin"], int(tunnel.ContainerPort), "%s: port tunnel vs origin.listen", cw)
			if udp := cfg.Origin.UDPAddress(); udp != "" {
				tu, ok := findPort(c, intstr.FromString("tunnel-udp"))
				require.True(t, ok, "%s: port named tunnel-udp: the origin's UDP tunnel listener (origin.udp_listen %q)", cw, udp)
				require.Equal(t, port(t, udp), int(tu.ContainerPort), "%s: port tunnel-udp vs origin.udp_listen", cw)
			}
			require.False(t, gw.sidecar, "%s: an origin must not be a native sidecar: those stop after the server, which it needs while draining", cw)
			for _, u := range cfg.Origin.Upstreams {
				pu, err := url.Parse(u.URL)
				require.NoError(t, err)
				require.Equal(t, "127.0.0.1", pu.Hostname(), "%s: upstream %s is the server in the pod", cw, u.Name)
				server := containerWithPort(containers, pu.Port())
				require.NotNil(t, server, "%s: upstream %s: no container of the pod declares port %s", cw, u.Name, pu.Port())
				require.GreaterOrEqual(t, preStopSleep(server), gwStop,
					"%s: the server must outlive the origin's preStop and drain", where)
				require.Less(t, preStopSleep(server), grace, where)
			}
		}
		if cfg.Edge != nil {
			require.NotEmpty(t, loadURLs, "%s: the edge's pod has a client", where)
			for _, lu := range loadURLs {
				pu, err := url.Parse(lu)
				require.NoError(t, err)
				require.Equal(t, "127.0.0.1", pu.Hostname(), "%s: the client calls the edge in its pod", where)
				found := false
				for _, l := range cfg.Edge.Listeners {
					found = found || fmt.Sprint(port(t, l.Listen)) == pu.Port()
				}
				require.True(t, found, "%s: client URL %s is not an edge listener", where, lu)
			}
		}
	}

	// Edges' peers: a Service whose port leads to an origin's tunnel listener.
	for _, gws := range gateways {
		for _, gw := range gws {
			if gw.cfg.Edge == nil {
				continue
			}
			for _, p := range gw.cfg.Edge.Peers {
				host, portStr, err := net.SplitHostPort(p.Address)
				require.NoError(t, err)
				svcName, _, _ := strings.Cut(host, ".")
				svc, ok := o.services[svcName]
				require.True(t, ok, "%s: peer %s address %s: no Service %s", gw.pod, p.Name, p.Address, svcName)
				// The transports the peer dials: TCP, UDP, or UDP with the TCP fallback.
				protocols := []corev1.Protocol{corev1.ProtocolTCP}
				if p.Transport == config.TransportUDP {
					protocols = []corev1.Protocol{corev1.ProtocolUDP}
					if p.Fallback == config.TransportTCP {
						protocols = append(protocols, corev1.ProtocolTCP)
					}
				}
				for _, proto := range protocols {
					var sp *corev1.ServicePort
					for i := range svc.Spec.Ports {
						if fmt.Sprint(svc.Spec.Ports[i].Port) == portStr && svc.Spec.Ports[i].Protocol == proto {
							sp = &svc.Spec.Ports[i]
						}
					}
					require.NotNil(t, sp, "%s: peer %s (transport %s): Service %s has no %s port %s", gw.pod, p.Name, p.Transport, svcName, proto, portStr)
					n := 0
					for dn, d := range o.deployments {
						if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
							continue
						}
						n++
						origins := gateways[dn]
						require.True(t, len(origins) == 1 && origins[0].cfg.Origin != nil, "Service %s selects %s, which runs no origin", svcName, dn)
						cp, ok := findPort(origins[0].container, sp.TargetPort)
						require.True(t, ok, "Service %s port %s: target %s is not a port of %s's origin", svcName, sp.Name, sp.TargetPort.String(), dn)
						require.Equal(t, proto, cp.Protocol, "Service %s port %s: target %s of %s", svcName, sp.Name, sp.TargetPort.String(), dn)
						listen := origins[0].cfg.Origin.Listen
						if proto == corev1.ProtocolUDP {
							listen = origins[0].cfg.Origin.UDPAddress()
							require.NotEmpty(t, listen, "%s: peer %s has transport udp, but the origin of %s has udp_listen: off", gw.pod, p.Name, dn)
						}
						require.Equal(t, port(t, listen), int(cp.ContainerPort), "Service %s: %s target port vs the origin's listener of %s", svcName, proto, dn)
					}
					require.NotZero(t, n, "Service %s selects no Deployment", svcName)
				}
			}
		}
	}

	// Services: selectors match pods that have the target ports.
	for name, svc := range o.services {
		checkService(t, o, name, svc, false)
	}
	for name, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		require.NoError(t, err)
		n := 0
		for _, d := range o.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				n++
				require.True(t, pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < int(*d.Spec.Replicas),
					"PodDisruptionBudget %s would block every eviction", name)
			}
		}
		require.Equal(t, 1, n, "PodDisruptionBudget %s must select one Deployment's pods", name)
	}
	for name := range o.configMaps {
		require.True(t, usedConfigMaps[name], "ConfigMap %s is used by no volume", name)
	}
	for name := range o.secrets {
		require.True(t, usedSecrets[name], "Secret %s is used by no volume", name)
	}
	for name := range externalSecrets {
		require.True(t, usedSecrets[name], "Secret %s (created out of band) is used by no volume", name)
	}
}

// checkCredentialMounts: every credential file a gateway's configuration reads where it
// is deployed is in a Secret created out of band (the base commits no key), with the
// documented key. The Secret is mounted read-only as a directory where the configuration
// looks: not with subPath, which never sees the Secret change, while keys rotate by
// changing it (soapgw re-reads the file). The file is readable by the gateway's group
// (the pod's fsGroup: the file belongs to root, the gateway is not root) and by nobody
// else.
func checkCredentialMounts(t *testing.T, cw string, spec *corev1.PodSpec, c *corev1.Container, volumes map[string]*corev1.Volume, raw string) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(k8sDir, "README.md"))
	require.NoError(t, err)
	files := deployedCredentialFiles(t, cw, raw)
	require.NotEmpty(t, files, "%s: the gateway reads no credential file", cw)
	for _, f := range files {
		found := false
		for _, m := range c.VolumeMounts {
			rel, ok := strings.CutPrefix(f, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !ok {
				continue
			}
			found = true
			v := volumes[m.Name]
			require.NotNil(t, v.Secret, "%s: %s is on volume %s, which is not a Secret", cw, f, m.Name)
			name := v.Secret.SecretName
			require.True(t, externalSecrets[name], "%s: %s is in Secret %s, which the base commits empty: credentials come from a Secret created out of band", cw, f, name)
			require.Empty(t, m.SubPath, "%s: mount %s: a subPath mount never sees the Secret change", cw, m.Name)
			require.True(t, m.ReadOnly, "%s: mount %s", cw, m.Name)
			key, mode := rel, v.Secret.DefaultMode
			if len(v.Secret.Items) > 0 {
				key = ""
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						key = it.Key
						if it.Mode != nil {
							mode = it.Mode
						}
					}
				}
				require.NotEmpty(t, key, "%s: %s: Secret volume %s has no item at %s", cw, f, m.Name, rel)
			}
			create := "kubectl -n soapgw create secret generic " + name + " --from-file=" + key + "="
			require.True(t, strings.Contains(string(readme), create), "%s: README.md must say how to create the Secret %s with its key %s: %q", cw, name, key, create)
			require.NotNil(t, mode, "%s: volume %s: defaultMode (the default, 0644, lets anyone read the key)", cw, m.Name)
			require.Zero(t, *mode&0o007, "%s: volume %s: %s is world-readable (mode %#o)", cw, m.Name, f, *mode)
			require.NotZero(t, *mode&0o040, "%s: volume %s: %s is not group-readable (mode %#o): the gateway reads it through fsGroup", cw, m.Name, f, *mode)
			sc := spec.SecurityContext
			require.True(t, sc.FSGroup != nil && sc.RunAsGroup != nil && *sc.FSGroup == *sc.RunAsGroup,
				"%s: fsGroup (the group of the Secret's files) must be the gateway's group", cw)
		}
		require.True(t, found, "%s: the configuration reads %s, which is on no volume of the container", cw, f)
	}
}

// checkService checks that a Service selects pods and that each port leads to a
// declared container port with the same protocol. A named targetPort must be on a
// regular container (the endpoints controller looks names up there); a numbered one may
// be on a native sidecar.
func checkService(t *testing.T, o *k8sObjects, name string, svc *corev1.Service, headless bool) {
	t.Helper()
	where := "Service " + name
	require.Empty(t, validation.IsDNS1035Label(name), where)
	require.NotEmpty(t, svc.Spec.Selector, "%s: selector", where)
	if headless {
		require.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, where)
	}
	n := 0
	for dn, d := range o.deployments {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		n++
		for _, sp := range svc.Spec.Ports {
			require.Empty(t, validation.IsValidPortName(sp.Name), where)
			require.Equal(t, portProtocol(sp.Name), sp.Protocol, "%s: port %s: only tunnel-udp is UDP (README.md, UDP)", where, sp.Name)
			var cs []*corev1.Container
			if sp.TargetPort.Type == intstr.String {
				for i := range d.Spec.Template.Spec.Containers {
					cs = append(cs, &d.Spec.Template.Spec.Containers[i])
				}
			} else {
				cs, _ = allContainers(&d.Spec.Template.Spec)
			}
			found := false
			for _, c := range cs {
				if cp, ok := findPort(c, sp.TargetPort); ok {
					found = true
					require.Equal(t, sp.Protocol, cp.Protocol, "%s: port %s protocol", where, sp.Name)
				}
			}
			require.True(t, found, "%s: port %s: target %s is no container port of %s", where, sp.Name, sp.TargetPort.String(), dn)
		}
	}
	require.NotZero(t, n, "%s: selector %v matches no Deployment", where, svc.Spec.Selector)
}

// checkMonitoring checks monitoring/ against the base: its Services select the base's
// pods on their admin port and the ServiceMonitor selects those Services.
func checkMonitoring(t *testing.T, base, mon *k8sObjects) {
	t.Helper()
	require.Len(t, mon.monitors, 1)
	require.Empty(t, mon.deployments, "monitoring/ must not repeat the base")
	all := newK8sObjects()
	all.deployments = base.deployments
	for name, svc := range mon.services {
		require.NotContains(t, base.services, name)
		all.services[name] = svc
		checkService(t, all, name, svc, true)
		for _, sp := range svc.Spec.Ports {
			require.Equal(t, "admin", sp.Name, "Service %s", name)
			for dn, d := range base.deployments {
				if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
					require.Equal(t, d.Spec.Template.Annotations["prometheus.io/port"], sp.TargetPort.String(), "Service %s scrapes %s's admin port", name, dn)
				}
			}
		}
	}
	for name, sm := range mon.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		require.NoError(t, err)
		var selected []string
		for sn, svc := range mon.services {
			if sel.Matches(labels.Set(svc.Labels)) {
				selected = append(selected, sn)
				for _, ep := range sm.Spec.Endpoints {
					require.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }),
						"ServiceMonitor %s: Service %s has no port %s", name, sn, ep.Port)
				}
			}
		}
		sort.Strings(selected)
		require.Equal(t, []string{"soapgw-edge-metrics", "soapgw-origin-metrics"}, selected, "ServiceMonitor %s", name)
		for _, ep := range sm.Spec.Endpoints {
			require.Equal(t, "/metrics", ep.Path)
			iv, err := time.ParseDuration(ep.Interval)
			require.NoError(t, err)
			st, err := time.ParseDuration(ep.ScrapeTimeout)
			require.NoError(t, err)
			require.LessOrEqual(t, st, iv, "scrapeTimeout must not exceed interval")
		}
	}
	// Every Deployment of the base is scraped.
	for dn, d := range base.deployments {
		require.True(t, slices.ContainsFunc(mapValues(mon.services), func(s *corev1.Service) bool {
			return labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))
		}), "no metrics Service for %s", dn)
	}
}

func mapValues[K comparable, V any](m map[K]V) []V {
	var vs []V
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

func preStopSleep(c *corev1.Container) int64 {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		return 0
	}
	return c.Lifecycle.PreStop.Sleep.Seconds
}

func containerWithPort(cs []*corev1.Container, p string) *corev1.Container {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if fmt.Sprint(cp.ContainerPort) == p {
				return c
			}
		}
	}
	return nil
}

func mustHost(t *testing.T, addr string) string {
	t.Helper()
	h, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	return h
}

// portProtocol is the protocol a port of these manifests must have: UDP for the origin's
// UDP tunnel listener (origin.udp_listen, by default the tunnel's own address), TCP for
// every other.
func portProtocol(name string) corev1.Protocol {
	if name == "tunnel-udp" {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}
