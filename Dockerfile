# syntax=docker/dockerfile:1
# The karmada-quota image: both binaries, statically linked (musl), on an empty base, run
# as a non-root user. No shell, no package manager, nothing else in it.
#
#   docker build -t karmada-quota:0.1.0 .
#
# The chart deploys karmada-quota:<appVersion> and runs /usr/local/bin/<binary>;
# e2e/tests/chart.rs checks that the two agree, and that RUST_VERSION is the toolchain
# pinned in rust-toolchain.toml.

ARG RUST_VERSION=1.95.0

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# musl-gcc: ring (TLS) compiles C and assembly for the static musl target.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
# --locked: exactly Cargo.lock's versions. The cache mounts keep the registry and the
# build directory between builds; the binaries are copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --target x86_64-unknown-linux-musl \
        -p karmada-quota-webhook -p karmada-quota-controller \
    && mkdir -p /out \
    && cp target/x86_64-unknown-linux-musl/release/karmada-quota-webhook \
          target/x86_64-unknown-linux-musl/release/karmada-quota-controller /out/

FROM scratch
LABEL org.opencontainers.image.title="karmada-quota" \
      org.opencontainers.image.description="Global quotas for Karmada: admission webhook and controller" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/karmada-quota-webhook /out/karmada-quota-controller /usr/local/bin/
# The distroless "nonroot" user; the chart's securityContext runs as the same ids.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/karmada-quota-webhook"]
CMD ["--help"]
