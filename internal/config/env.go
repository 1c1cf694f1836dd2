package config

// Environment variables that name the image configuration files when the
// configuration file names none. What the projects around podbay actually
// honour (checked against their sources):
//
//   - containers/image itself reads no variable for either file: its
//     registries.conf lookup (sysregistriesv2) and policy.json lookup
//     (signature.DefaultPolicy) go by SystemContext, $HOME and /etc only.
//   - Its CLI helper pkg/cli/environment.UpdateRegistriesConf, which podman,
//     buildah and skopeo call, sets the registries.conf path from
//     CONTAINERS_REGISTRIES_CONF, else REGISTRIES_CONFIG_PATH, when the
//     caller set none. podbay does the same. No variable names the
//     registries.conf.d directory (there is no CONTAINERS_REGISTRIES_CONF_DIR
//     in containers/image), so none is read for registries_conf_dir.
//   - For policy.json no project honours a variable: containers/image
//     declined one (containers/image#1264, "CONTAINERS_POLICY_JSON"), and
//     CRI-O's CONTAINER_SIGNATURE_POLICY is only the environment form of its
//     --signature-policy flag. podbay reads CONTAINERS_POLICY_JSON, the
//     name proposed there, named after the CONTAINERS_* family.
//
// A path set in the file or by a flag always wins.
const (
	EnvRegistriesConf       = "CONTAINERS_REGISTRIES_CONF"
	EnvRegistriesConfLegacy = "REGISTRIES_CONFIG_PATH"
	EnvPolicy               = "CONTAINERS_POLICY_JSON"
)

// applyEnv fills image.registries_conf and image.signature_policy from the
// environment when the file did not set them; defined reports whether the
// file set a key of the [image] table.
func applyEnv(c *Config, defined func(key string) bool, lookup func(string) (string, bool)) {
	if !defined("registries_conf") {
		for _, name := range []string{EnvRegistriesConf, EnvRegistriesConfLegacy} {
			if v, ok := lookup(name); ok {
				c.Image.RegistriesConf = v
				break
			}
		}
	}
	if !defined("signature_policy") {
		if v, ok := lookup(EnvPolicy); ok && v != "" {
			c.Image.SignaturePolicy = v
		}
	}
}
