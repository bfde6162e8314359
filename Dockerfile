# warren's container image. Base images are named in full, as buildah and podman require.
#
#   docker build -t warren .                      (or: buildah bud -t warren .)
#   docker run -p 8080:8080 -v warren-data:/data -e WARREN_CONFIG=/etc/warren/warren.toml \
#     -v ./warren.toml:/etc/warren/warren.toml:ro warren
#
# Inside, warren listens on 0.0.0.0:8080; it refuses that address while the database has no
# user and no proxy authentication is configured (docs/deploy.md: create the first admin with
# `docker run -i ... warren user add NAME --role admin`). The database lives in /data, a volume.
#
# `--build-arg BINARY=prebuilt` takes the binary from target/image/warren instead of compiling
# it here (.ci/image: the binary the tests ran, on a machine that cannot pull rust images).
ARG BINARY=build

FROM docker.io/library/rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs askama.toml ./
COPY vendor vendor
COPY src src
COPY migrations migrations
COPY templates templates
COPY static static
# The documentation served at /docs is compiled in (src/web/docs.rs).
COPY docs docs
COPY benches benches
# The commit `warren version` and /metrics name, and its date (`docker build --build-arg
# WARREN_COMMIT=$(git rev-parse --short=12 HEAD) --build-arg WARREN_COMMIT_DATE=$(git log -1 --format=%cs)`).
ARG WARREN_COMMIT=unknown
ARG WARREN_COMMIT_DATE=unknown
RUN WARREN_COMMIT=$WARREN_COMMIT WARREN_COMMIT_DATE=$WARREN_COMMIT_DATE cargo build --release --locked --bin warren && cp target/release/warren /warren

FROM docker.io/library/debian:bookworm-slim AS prebuilt
COPY target/image/warren /warren

FROM ${BINARY} AS binary

FROM docker.io/library/debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /data --create-home warren \
    && chmod 0700 /data
COPY --from=binary /warren /usr/local/bin/warren
USER 10001:10001
WORKDIR /data
ENV WARREN_LISTEN=0.0.0.0:8080 \
    WARREN_DATABASE=/data/warren.db \
    WARREN_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 CMD ["warren", "healthcheck"]
ENTRYPOINT ["warren"]
CMD ["serve"]
