# The README's commands. Each target is a script under hack/ so it also runs without make.
.PHONY: demo test e2e-karmada e2e-karmada-queue-wait bench-karmada crds fmt lint bench image fuzz plugin-dist

demo: ## Local control plane + webhook + controller + samples; Ctrl-C stops it all
	bash hack/demo.sh

test: ## Unit and end-to-end tests, the image's included (installs what they need, builds the image first)
	bash hack/test.sh

e2e-karmada: ## Optional: e2e tests against real Karmada v1.14 (KARMADA_SRC, KARMADA_BIN_DIR; docs/karmada.md)
	bash hack/e2e-karmada.sh

e2e-karmada-queue-wait: ## Optional: real Karmada, time to start after waits of 30 s, 3 and 10 min, queue vs refusal (~25 min; docs/karmada.md)
	KQ_QUEUE_WAITS=$${KQ_QUEUE_WAITS:-30,180,600} KARMADA_E2E_TESTS=karmada_queue_wait bash hack/e2e-karmada.sh

crds: ## Regenerate the checked-in CRD from the Rust types (and the chart's copy)
	cargo run -q -p karmada-quota-crds --bin crdgen > crds/quota.karmada.io_karmadaquotas.yaml
	cp crds/quota.karmada.io_karmadaquotas.yaml charts/karmada-quota/files/
	cargo run -q -p karmada-quota-crds --bin crdgen cluster > crds/quota.karmada.io_karmadaclusterquotas.yaml
	cp crds/quota.karmada.io_karmadaclusterquotas.yaml charts/karmada-quota/files/
	cargo run -q -p karmada-quota-crds --bin crdgen share > crds/quota.karmada.io_karmadaclusterquotashares.yaml
	cp crds/quota.karmada.io_karmadaclusterquotashares.yaml charts/karmada-quota/files/
	cargo run -q -p karmada-quota-crds --bin crdgen batch > crds/quota.karmada.io_karmadaquotareservations.yaml
	cp crds/quota.karmada.io_karmadaquotareservations.yaml charts/karmada-quota/files/

image: ## Build the image the chart deploys (docker if a daemon answers, else buildah), then run it (e2e/tests/image.rs)
	bash hack/image.sh build
	bash hack/image.sh test

fmt:
	cargo fmt --all

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

bench-karmada: ## Real Karmada: none vs project vs Karmada's FederatedResourceQuota (KARMADA_SRC, KARMADA_BIN_DIR; bench/karmada.sh --help)
	bash bench/karmada.sh

bench: ## Engine micro-benchmarks (criterion)
	cargo bench -p karmada-quota-core

fuzz: ## Coverage-guided fuzzing of every parser, FUZZ_SECONDS per target (installs cargo-afl)
	bash hack/fuzz.sh

plugin-dist: ## The kubectl plugin as a krew-style archive and manifest (target/plugin-dist)
	bash hack/plugin-dist.sh
