# The karmada-quota image: both binaries, statically linked, on an empty base, run as a
# non-root user. No shell, no package manager, nothing else in it.
#
# The binaries are built on the host first (no Rust base image, no musl target: both
# work offline), into a build context that holds only what the image needs:
#
#   make image    # = hack/image.sh: cargo build --release --locked (static glibc),
#                 #   stages the context, builds with docker (when a daemon answers) or
#                 #   buildah, exports target/image/karmada-quota-<version>.oci.tar
#
# By hand, from a context hack/image.sh staged (`hack/image.sh stage DIR`):
#
#   docker build -t karmada-quota:0.3.0 -f Dockerfile DIR
#   buildah --storage-driver vfs bud --isolation chroot -t karmada-quota:0.3.0 -f Dockerfile DIR
#
# The chart deploys karmada-quota:<appVersion> (or image.digest) and runs
# /usr/local/bin/<binary>; e2e/tests/chart.rs checks that the two agree, and
# e2e/tests/image.rs runs both binaries from the image's root filesystem.

FROM scratch
LABEL org.opencontainers.image.title="karmada-quota" \
      org.opencontainers.image.description="Global quotas for Karmada: admission webhook and controller" \
      org.opencontainers.image.version="0.3.0" \
      org.opencontainers.image.licenses="Apache-2.0"
# passwd/group: uid and gid 65532 ("nonroot", as distroless names them). nsswitch.conf:
# /etc/hosts before DNS (glibc's default without the file asks DNS first and stops on
# its answer, so a pod's hostAliases would be ignored). The CA bundle: kube's client
# trusts the system store where a kubeconfig or Cluster names no CA.
COPY etc/passwd etc/group etc/nsswitch.conf /etc/
COPY etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY karmada-quota-webhook karmada-quota-controller /usr/local/bin/
# The chart's securityContext runs as the same ids.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/karmada-quota-webhook"]
CMD ["--help"]
