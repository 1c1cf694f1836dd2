// Package testimage builds OCI images from local files and serves them from
// an in-process registry on loopback, so that podbay's tests and an offline
// operator can pull images without the internet.
//
// The pieces, bottom up:
//
//   - [BusyboxLayer] turns the host's busybox into a layer shaped like
//     the official busybox image: one hard link per applet, /etc/passwd and
//     /etc/group with root, nobody, www-data and test users, /tmp 1777.
//   - [Spec] describes an image: repository, tags, extra files, config, and
//     platforms. [Builder.Build] turns a Spec into an image or, with several
//     platforms, an image index.
//   - [Registry] is go-containerregistry's registry behind basic auth and
//     switchable faults; [Registry.Push] builds and pushes a Spec.
//   - [DefaultImages] is the ready-made set the integration tests and
//     podbay-testimages serve.
//   - [CritestImages] are stand-ins for the images cri-tools' critest pulls,
//     served under their upstream names behind [CritestMirrors] (see
//     [MirrorsConf]); they run the applets of package standin (pgrep, ipcs,
//     nginx, httpd, nnp) and are built from Debian's dynamically linked
//     busybox, whose loader and libraries [BusyboxLayer] adds.
//
// Everything is deterministic: file times are fixed at [Epoch] and layers are
// compressed with a fixed gzip header, so the same inputs (the busybox
// binary, the Spec, and the Go version's compress/flate) give the same
// digests on every run and every host.
package testimage
