package ratelimit

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floatRateInterval is how the token bucket constructors turned a rate of
// tokens per second into whole clock units per token before they took a
// Rate: unitsPerSecond/rate, rounded to nearest. It is kept as the
// reference the Rate path must agree with.
func floatRateInterval(rate, unitsPerSecond float64) (int64, bool) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return 0, false
	}
	interval := unitsPerSecond / rate
	if interval < 1 || interval > maxSpan {
		return 0, false
	}
	return int64(math.Round(interval)), true
}

// perSecondOf is r as the float rate of tokens per second the constructors
// took before.
func perSecondOf(r Rate) float64 { return float64(r.n) / r.d.Seconds() }

func TestRateIntervalEqualsTheFloatPathsForTheSameRate(t *testing.T) {
	rates := []Rate{
		PerSecond(1), PerSecond(2), PerSecond(3), PerSecond(7), PerSecond(10),
		PerSecond(999), PerSecond(1000), PerSecond(700_000), PerSecond(1_000_000),
		PerSecond(333_333_333), PerSecond(999_999_999), PerSecond(1_000_000_000),
		PerMinute(1), PerMinute(7), PerMinute(60), PerMinute(100), PerMinute(100_000),
		PerHour(1), PerHour(4), PerHour(1000), PerHour(3_600_000),
		Every(time.Nanosecond), Every(time.Microsecond), Every(1500 * time.Millisecond),
		Every(2 * time.Second), Every(1000 * time.Second), Every(24 * time.Hour),
		Per(5, 2*time.Second), Per(3, 7*time.Second), Per(65535, 10*time.Second),
		Per(3, time.Second+time.Nanosecond), Per(7, time.Minute+time.Nanosecond),
	}
	for _, unit := range []time.Duration{time.Nanosecond, time.Microsecond} {
		for _, r := range rates {
			want, wantOK := floatRateInterval(perSecondOf(r), float64(time.Second/unit))
			got, err := r.interval("NewTokenBucket", unit)
			if !wantOK {
				require.ErrorIs(t, err, ErrInvalidConfig, "%v in units of %v", r, unit)
				continue
			}
			require.NoError(t, err, "%v in units of %v", r, unit)
			assert.Equal(t, want, got, "%v in units of %v", r, unit)
		}
	}
}

func TestRandomRatesGiveTheFloatPathsInterval(t *testing.T) {
	r := rand.New(rand.NewPCG(36, 2))
	compared := 0
	for range sized(2000, 20000) {
		n := 1 + r.IntN(1_000_000)
		d := time.Duration(1 + r.Int64N(int64(time.Hour)))
		rate := Per(n, d)
		for _, unit := range []time.Duration{time.Nanosecond, time.Microsecond} {
			got, err := rate.interval("NewTokenBucket", unit)
			want, wantOK := floatRateInterval(perSecondOf(rate), float64(time.Second/unit))
			den := int64(n) * int64(unit)
			// The float path rounds twice (the rate, then the interval):
			// within a hair of a half it may land on either side, where
			// the integer path is exact.
			if nearHalf := math.Abs(float64(2*(int64(d)%den)-den)) < float64(den)*1e-9; nearHalf {
				continue
			}
			if !wantOK {
				assert.ErrorIs(t, err, ErrInvalidConfig, "%v in units of %v", rate, unit)
				continue
			}
			compared++
			require.NoError(t, err, "%v in units of %v", rate, unit)
			assert.Equal(t, want, got, "%v in units of %v", rate, unit)
		}
	}
	assert.Greater(t, compared, 1000)
}

func TestRateIntervalRoundsHalvesUp(t *testing.T) {
	// 3 ns over 2 is 1.5 ns: 2 ns; 5 ns over 4 is 1.25 ns: 1 ns.
	got, err := Per(2, 3*time.Nanosecond).interval("NewTokenBucket", time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, int64(2), got)
	got, err = Per(4, 5*time.Nanosecond).interval("NewTokenBucket", time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, int64(1), got)
}

func TestRateStringNamesUnitsAndPeriod(t *testing.T) {
	for want, r := range map[string]Rate{
		"10/s":      PerSecond(10),
		"60/min":    PerMinute(60),
		"5/h":       PerHour(5),
		"1/2s":      Every(2 * time.Second),
		"1/500ms":   Every(500 * time.Millisecond),
		"1/s":       Every(time.Second),
		"3/1m30s":   Per(3, 90*time.Second),
		"7/min":     Per(7, time.Minute),
		"0/0s":      {},
		"0/s":       PerSecond(0),
		"-2/min":    PerMinute(-2),
		"1/-1s":     Every(-time.Second),
		"1000000/h": Per(1_000_000, time.Hour),
		"1/2h0m0s":  Every(2 * time.Hour),
	} {
		assert.Equal(t, want, r.String())
	}
}

func TestRateConstructorsBuildTheRatesTheirNamesSay(t *testing.T) {
	assert.Equal(t, Per(10, time.Second), PerSecond(10))
	assert.Equal(t, Per(60, time.Minute), PerMinute(60))
	assert.Equal(t, Per(5, time.Hour), PerHour(5))
	assert.Equal(t, Per(1, 2*time.Second), Every(2*time.Second))
	assert.NotEqual(t, PerSecond(1), Per(2, 2*time.Second), "the same speed written differently is not ==")
}

// The documented call sites build what they say. NewTokenBucket(20,
// PerSecond(10)), the rate and burst swapped, does not compile: the burst is
// an int and the rate a Rate, so it cannot be checked here but cannot slip
// through either.
func TestDocumentedCallSitesConstructWhatTheySay(t *testing.T) {
	_, client, _ := miniredisClock(t)
	cases := []struct {
		name       string
		rate       Rate
		burst      int
		wantWindow time.Duration // burst × time per token
	}{
		{"PerSecond(10), 20: 10 a second, bursts of 20", PerSecond(10), 20, 2 * time.Second},
		{"PerMinute(60), 60: one a second, bursts of 60", PerMinute(60), 60, time.Minute},
		{"PerHour(1000), 1000", PerHour(1000), 1000, time.Hour},
		{"Every(2s), 3: one every 2 s, bursts of 3", Every(2 * time.Second), 3, 6 * time.Second},
		{"Per(5, 2s), 5: 2.5 a second", Per(5, 2*time.Second), 5, 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := Policy{Limit: tc.burst, Window: tc.wantWindow}
			local, err := NewTokenBucket(tc.rate, tc.burst)
			require.NoError(t, err)
			assert.Equal(t, want, local.Policy())
			remote, err := NewRedisTokenBucket(client, tc.rate, tc.burst)
			require.NoError(t, err)
			assert.Equal(t, want, remote.Policy())
		})
	}
}

func TestInvalidRatesAreErrorsNamingTheProblem(t *testing.T) {
	_, client, _ := miniredisClock(t)
	cases := []struct {
		name string
		rate Rate
		want string
	}{
		{"the zero Rate", Rate{}, "the rate is the zero Rate; build one with PerSecond, PerMinute, PerHour, Every or Per"},
		{"zero units", PerSecond(0), "rate 0/s: units 0 must be > 0"},
		{"negative units", PerHour(-1), "rate -1/h: units -1 must be > 0"},
		{"zero period", Every(0), "rate 1/0s: period 0s must be > 0"},
		{"negative period", Per(3, -time.Minute), "rate 3/-1m0s: period -1m0s must be > 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			local, err := NewTokenBucket(tc.rate, 1)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Equal(t, "ratelimit: invalid configuration: NewTokenBucket: "+tc.want, err.Error())
			assert.Nil(t, local)
			remote, err := NewRedisTokenBucket(client, tc.rate, 1)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Equal(t, "ratelimit: invalid configuration: NewRedisTokenBucket: "+tc.want, err.Error())
			assert.Nil(t, remote)
		})
	}
}

func TestRatesFasterThanTheClockAreErrors(t *testing.T) {
	// 1 ns in process: a billion a second is the fastest.
	_, err := NewTokenBucket(PerSecond(1_000_000_000), 1)
	require.NoError(t, err)
	_, err = NewTokenBucket(PerSecond(1_000_000_001), 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "rate 1000000001/s gives less than one clock unit (1ns) per token")
	// 1 µs on Redis: a million a second is the fastest.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	_, err = NewRedisTokenBucket(client, PerSecond(1_000_000), 1)
	require.NoError(t, err)
	_, err = NewRedisTokenBucket(client, Per(1001, time.Millisecond), 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "rate 1001/1ms gives less than one clock unit (1µs) per token")
}

func TestParseRateReadsWhatStringPrints(t *testing.T) {
	for s, want := range map[string]Rate{
		"10/s":                       PerSecond(10),
		"60/min":                     PerMinute(60),
		"5/h":                        PerHour(5),
		"1/2s":                       Every(2 * time.Second),
		"1/500ms":                    Every(500 * time.Millisecond),
		"3/1m30s":                    Per(3, 90*time.Second),
		"100/1h":                     Per(100, time.Hour),
		"7/1.5s":                     Per(7, 1500*time.Millisecond),
		"1/.5s":                      Every(500 * time.Millisecond),
		"9223372036854775807/s":      PerSecond(math.MaxInt64),
		"1/2562047h47m16.854775807s": Every(math.MaxInt64),
	} {
		got, err := ParseRate(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, r := range []Rate{PerSecond(1), PerMinute(7), PerHour(1000), Every(time.Nanosecond), Per(3, 90*time.Second), Every(2 * time.Hour)} {
		got, err := ParseRate(r.String())
		require.NoError(t, err, r)
		assert.Equal(t, r, got)
	}
}

func TestParseRateRejectsAnythingElseNamingTheProblem(t *testing.T) {
	for s, want := range map[string]string{
		"":                      `ParseRate(""): want units/period, such as "10/s", "60/min" or "1/2s"`,
		"10":                    `ParseRate("10"): want units/period`,
		"10-s":                  `ParseRate("10-s"): want units/period`,
		"/s":                    `ParseRate("/s"): units "" must be a positive whole number, such as 10`,
		"0/s":                   `ParseRate("0/s"): units "0" must be a positive whole number`,
		"010/s":                 `ParseRate("010/s"): units "010" must be a positive whole number`,
		"-1/s":                  `ParseRate("-1/s"): units "-1" must be a positive whole number`,
		"+1/s":                  `ParseRate("+1/s"): units "+1" must be a positive whole number`,
		"1.5/s":                 `ParseRate("1.5/s"): units "1.5" must be a positive whole number`,
		" 10/s":                 `ParseRate(" 10/s"): units " 10" must be a positive whole number`,
		"9223372036854775808/s": `ParseRate("9223372036854775808/s"): units 9223372036854775808 are beyond an int`,
		"10/":                   `ParseRate("10/"): period "" must be "s", "min", "h" or a duration such as "2s" or "1m30s"`,
		"10/m":                  `ParseRate("10/m"): period "m" must be "s", "min", "h" or a duration`,
		"10/sec":                `ParseRate("10/sec"): period "sec" must be`,
		"10/s ":                 `ParseRate("10/s "): period "s " must be`,
		"10/2":                  `ParseRate("10/2"): period "2" must be`,
		"10/-2s":                `ParseRate("10/-2s"): period "-2s" must be`,
		"10/+2s":                `ParseRate("10/+2s"): period "+2s" must be`,
		"10/0s":                 `ParseRate("10/0s"): period "0s" must be > 0`,
		"10/s/s":                `ParseRate("10/s/s"): period "s/s" must be`,
	} {
		_, err := ParseRate(s)
		require.ErrorIs(t, err, ErrInvalidConfig, s)
		assert.Contains(t, err.Error(), want, s)
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"10/s", "60/min", "5/h", "1/2s", "3/1m30s", "0/s", "10/m", "1/.5s", "1/-0s", "9/1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Equal(t, Rate{}, r)
			return
		}
		if r.n <= 0 || r.d <= 0 {
			t.Fatalf("ParseRate(%q) = %#v, an invalid Rate, without an error", s, r)
		}
		back, err := ParseRate(r.String())
		require.NoError(t, err, "ParseRate(%q).String() = %q", s, r)
		assert.Equal(t, r, back, "ParseRate(%q).String() = %q", s, r)
	})
}
