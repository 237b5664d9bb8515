# Multi-stage build: compile with the Swift toolchain, run on a slim Debian as a non-root user.
# The Swift standard library is linked statically, so the runtime image needs no Swift runtime.
FROM swift:6.1-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends libsqlite3-dev && rm -rf /var/lib/apt/lists/*
COPY . .
RUN swift build -c release --product siwa --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/siwa" /siwa

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libsqlite3-0 tzdata \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home /var/lib/siwa --create-home siwa
COPY --from=build /siwa /usr/local/bin/siwa
COPY Templates /usr/share/siwa/Templates
COPY Public /usr/share/siwa/Public
WORKDIR /usr/share/siwa
USER siwa
ENV SIWA_HOST=0.0.0.0 SIWA_PORT=8080 SIWA_DB=/var/lib/siwa/siwa.sqlite
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD ["/bin/sh", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ok <&3"]
ENTRYPOINT ["/usr/local/bin/siwa"]
CMD ["serve"]
