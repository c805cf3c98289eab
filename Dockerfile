# ferrite serve in a container: built with the stable Rust image, run as a
# non-root user in a slim Debian image. Models are not in the image: mount a
# directory at /models (scripts/fetch-models.sh fills ./models) and name them
# by short name, file name or path:
#
#   docker build -t ferrite .
#   docker run --rm -p 8080:8080 -v "$PWD/models:/models:ro" ferrite qwen2.5-0.5b minilm
#
# Every `ferrite serve` option works as an argument or a FERRITE_* variable
# (FERRITE_API_KEY, FERRITE_CTX, ...). scripts/test-container-steps.sh runs
# these steps without a container tool (README, "Container").

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p ferrite-cli \
 && strip target/release/ferrite

FROM debian:bookworm-slim
# curl for the health check only.
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ferrite
COPY --from=build /src/target/release/ferrite /usr/local/bin/ferrite
ENV FERRITE_MODELS=/models \
    FERRITE_HOST=0.0.0.0 \
    FERRITE_PORT=8080 \
    FERRITE_LOG=info
USER 10001
EXPOSE 8080
VOLUME ["/models"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["ferrite", "serve"]
