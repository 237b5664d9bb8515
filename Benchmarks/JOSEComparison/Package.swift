// swift-tools-version:6.1
// Issue 16 part 3: the project's own JOSE module against vapor/jwt-kit 5 on the same tokens. A package of its own
// so that jwt-kit never enters the root package's graph (and CI's build). Run it with Benchmarks/run-jose.sh.
import PackageDescription

let package = Package(
    name: "JOSEComparison",
    platforms: [.macOS(.v15)],
    dependencies: [
        // Named, so the product references below hold whatever the clone's directory is called.
        .package(name: "siwa", path: "../.."),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
    ],
    targets: [
        .executableTarget(
            name: "JOSEComparison",
            dependencies: [
                .product(name: "JOSE", package: "siwa"),
                .product(name: "AppleSignIn", package: "siwa"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
