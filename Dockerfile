# haq as a container image: a static (musl) binary on Alpine.
#
#   docker build -t haq .
#   docker run --rm --user "$(id -u):$(id -g)" -v "$PWD:/work" haq run /opt/haq/scenarios/quickstart.yaml
#
# Alpine, not scratch: `command` faults and restarts run through `sh -c`, and https
# targets are verified against the system's CA certificates. The embedded sim runs in
# the container too (haq starts its own worker, gateway and tool processes).

FROM rust:1-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --bin haq && strip target/release/haq

FROM alpine:3.20
RUN apk add --no-cache ca-certificates tini && adduser -D -u 10001 haq
COPY --from=build /src/target/release/haq /usr/local/bin/haq
COPY scenarios /opt/haq/scenarios
COPY workloads /opt/haq/workloads
USER haq
WORKDIR /work
# tini reaps the sim's processes and forwards Ctrl-C / SIGTERM, so haq heals its faults.
ENTRYPOINT ["/sbin/tini", "--", "haq"]
CMD ["--help"]
