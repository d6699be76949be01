# Build: docker build -t homework .
# Run:   docker run -d --name homework -p 8080:8080 -v homework-data:/data homework
#        docker exec -i homework homework user add --email you@example.com --admin   (password on stdin)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION names the build (homework version); empty: the module's build information.
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/homework ./cmd/homework

FROM alpine:3.20
RUN apk add --no-cache ca-certificates tzdata \
 && adduser -D -H -u 10001 homework \
 && mkdir /data && chown homework:homework /data
COPY --from=build /out/homework /usr/local/bin/homework
VOLUME /data
# HOMEWORK_SHUTDOWN_TIMEOUT fits inside `docker stop`'s default 10 s before
# SIGKILL. For a longer grace raise both: -e HOMEWORK_SHUTDOWN_TIMEOUT=25s
# with docker run --stop-timeout 30 (compose: stop_grace_period: 30s).
# An iteration cut off by shutdown is recovered at the next start.
ENV HOMEWORK_ADDR=0.0.0.0:8080 \
    HOMEWORK_DB=/data/homework.db \
    HOMEWORK_SHUTDOWN_TIMEOUT=8s
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD wget -q -O /dev/null http://127.0.0.1:8080/healthz || exit 1
USER homework
ENTRYPOINT ["/usr/local/bin/homework"]
CMD ["serve"]
