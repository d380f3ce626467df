# The taskq server's image: a binary built beforehand, on a Debian base.
#
#   cargo build --release
#   docker build -t taskq:latest .          # or: podman build
#   docker run -p 8080:8080 -v taskq-data:/var/lib/taskq/taskq-data taskq:latest
#
# BASE is any Debian-like image with the C library the binary was built
# against (bookworm's glibc 2.36 for a binary built on bookworm; a binary
# built on a newer system needs a newer base). BINARY is the binary's path
# in the build context.
ARG BASE=debian:bookworm-slim
FROM ${BASE}

# CA roots for HTTPS webhooks and model endpoints (without them the server
# still starts, and refuses those calls), and the user the server runs as.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 taskq \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/taskq \
        --shell /usr/sbin/nologin taskq \
    && mkdir -p /var/lib/taskq/taskq-data \
    && chown -R taskq:taskq /var/lib/taskq

ARG BINARY=target/release/taskq
COPY ${BINARY} /usr/local/bin/taskq

# By number, so that a cluster's `runAsNonRoot` can check it.
USER 10001:10001
# `taskq serve` keeps its SQLite file and generated master key in
# `taskq-data` under the working directory: the volume.
WORKDIR /var/lib/taskq
VOLUME /var/lib/taskq/taskq-data
ENV TASKQ_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The server stops on SIGTERM: in-flight requests finish, orgs hand over.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/taskq"]
CMD ["serve"]
