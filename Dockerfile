# Build: docker build -t warren .
# Run:   docker run -p 8080:8080 -e WARREN_LISTEN=0.0.0.0:8080 -v warren-data:/data warren
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
COPY migrations migrations
COPY templates templates
COPY static static
COPY benches benches
RUN cargo build --release --locked --bin warren

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /data --create-home warren
COPY --from=build /src/target/release/warren /usr/local/bin/warren
USER warren
WORKDIR /data
ENV WARREN_DATABASE=/data/warren.db
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 CMD ["warren", "healthcheck"]
ENTRYPOINT ["warren"]
CMD ["serve"]
