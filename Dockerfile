# Build: docker build -t homework .
# Run:   docker run -p 8080:8080 -v homework-data:/data homework
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/homework ./cmd/homework

FROM alpine:3.20
RUN apk add --no-cache ca-certificates tzdata \
 && adduser -D -H -u 10001 homework \
 && mkdir /data && chown homework:homework /data
COPY --from=build /out/homework /usr/local/bin/homework
VOLUME /data
ENV HOMEWORK_ADDR=0.0.0.0:8080 \
    HOMEWORK_DB=/data/homework.db
EXPOSE 8080
USER homework
ENTRYPOINT ["/usr/local/bin/homework"]
CMD ["serve"]
