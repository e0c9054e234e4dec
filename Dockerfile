# One image with every Switchyard binary; compose.yaml picks the command.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --workspace --bins

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/switchyard /src/target/release/switchyard-api \
     /src/target/release/switchyard-worker /src/target/release/switchyard-scheduler /usr/local/bin/
USER nobody
ENTRYPOINT ["/usr/local/bin/switchyard"]
